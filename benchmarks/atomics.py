"""Run the atomics benchmark: ``python benchmarks/atomics.py [--quick] [--json]``."""

import sys

from asyncnet.bench.atomics import main

if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
