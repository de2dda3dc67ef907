"""Data files shipped inside the package (see ``LICENSE-digits.txt`` beside this file)."""
