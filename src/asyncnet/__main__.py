"""``python -m asyncnet`` is the ``asyncnet`` command (``torchrun -m asyncnet train`` uses it)."""

import os
import sys

_parent = os.getppid()  # read before the imports: a torchrun agent killed during them is seen as gone


def _current_folder_last() -> None:
    """``python -m`` puts the current folder first on sys.path, where its files shadow the
    standard library: pathlib imports ntpath, which tries ``import nt`` (Windows' os module), and
    a script named nt.py in the folder ran there (one importing torch crashed the process). The
    folder goes last (it still serves ``--model my_module:function``) and never provides a
    standard module's name (nt, winreg, msvcrt: absent here, so found nowhere else)."""
    if not sys.path or sys.flags.safe_path or sys.path[0] not in ("", os.getcwd()):
        return
    folder = sys.path.pop(0)
    sys.path.append(folder)

    class StandardNamesNotFromTheFolder:
        @staticmethod
        def find_spec(name: str, path: object = None, target: object = None) -> None:
            if path is None and name in sys.stdlib_module_names and sys.path and sys.path[-1] == folder:
                from importlib.machinery import PathFinder

                if PathFinder.find_spec(name, sys.path[:-1]) is None:
                    raise ModuleNotFoundError(f"No module named {name!r}", name=name)
            return None

    at = next(
        (i for i, f in enumerate(sys.meta_path) if getattr(f, "__name__", "") == "PathFinder"), len(sys.meta_path)
    )
    sys.meta_path.insert(at, StandardNamesNotFromTheFolder)


_current_folder_last()

try:
    from asyncnet._parent_watch import watch_torchrun_agent
    from asyncnet.cli.main import main
except KeyboardInterrupt:  # Ctrl-C while the imports run: still one line, no traceback
    sys.stderr.write("asyncnet: interrupted\n")
    sys.exit(130)

watch_torchrun_agent(_parent)  # a torchrun rank stops when its agent is gone
sys.exit(main())
