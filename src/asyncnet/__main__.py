"""``python -m asyncnet`` is the ``asyncnet`` command (``torchrun -m asyncnet train`` uses it)."""

import os
import sys

_parent = os.getppid()  # read before the imports: a torchrun agent killed during them is seen as gone

try:
    from asyncnet._parent_watch import watch_torchrun_agent
    from asyncnet.cli.main import main
except KeyboardInterrupt:  # Ctrl-C while the imports run: still one line, no traceback
    sys.stderr.write("asyncnet: interrupted\n")
    sys.exit(130)

watch_torchrun_agent(_parent)  # a torchrun rank stops when its agent is gone
sys.exit(main())
