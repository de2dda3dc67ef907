"""Executor benchmark (see asyncnet.bench.executor): ``python benchmarks/executor.py [--json] [--quick]``."""

import sys

from asyncnet.bench.executor import main

if __name__ == "__main__":
    sys.exit(main())
