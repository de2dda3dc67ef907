"""``python -m asyncnet`` is the ``asyncnet`` command (``torchrun -m asyncnet train`` uses it)."""

import sys

from asyncnet.cli.main import main

sys.exit(main())
