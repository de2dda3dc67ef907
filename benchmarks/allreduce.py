"""Run the all-reduce benchmark: ``python benchmarks/allreduce.py [--quick] [--json]``."""

import sys

from asyncnet.bench.allreduce import main

if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
