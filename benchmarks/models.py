"""Models benchmark (see asyncnet.bench.models): ``python benchmarks/models.py [--json] [--quick] [--model NAME]``."""

import sys

from asyncnet.bench.models import main

if __name__ == "__main__":
    sys.exit(main())
