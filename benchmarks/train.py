"""Training benchmark (see asyncnet.bench.train): ``python benchmarks/train.py [--json] [--quick]``."""

import sys

from asyncnet.bench.train import main

if __name__ == "__main__":
    sys.exit(main())
