"""Entry point of the ``asyncnet`` command.

Every subcommand lives in its own module exposing ``add_parser(subparsers)``; a handler
returns an exit status. Whatever the input, signal or pipe, the command prints at most one
line on stderr and never a traceback:

- user errors (``CLIError``, ``AsyncNetError``): ``asyncnet: error: ...``, exit 1;
- argparse errors: one line, exit 2;
- Ctrl-C: ``asyncnet: interrupted``, exit 130;
- stdout closed early (``asyncnet ops | head -1``): exit 141 (128 + SIGPIPE) in silence, as
  ``cat``, ``yes`` and other Unix tools end;
- a bug: ``asyncnet: internal error: ...``, exit 70 (``ASYNCNET_DEBUG=1`` re-raises it).
"""

from __future__ import annotations

import argparse
import importlib
import os
import signal
import sys
import threading

from asyncnet import __version__
from asyncnet.cli.common import CLIError
from asyncnet.errors import AsyncNetError

SUBCOMMANDS = [
    "run_cmd",
    "ops_cmd",
    "trace_cmd",
    "graph_cmd",
    "train_cmd",
    "bench_cmd",
    "simulate_cmd",
    "clean_cmd",
    "predict_cmd",
]
EXIT_ERROR, EXIT_USAGE, EXIT_SOFTWARE, EXIT_PIPE = 1, 2, 70, 141


class _Parser(argparse.ArgumentParser):
    def error(self, message: str) -> None:  # one line, exit 2 (argparse prints usage too)
        self.exit(EXIT_USAGE, f"{self.prog}: error: {_one_line(message)}\n")


def build_parser() -> argparse.ArgumentParser:
    parser = _Parser(prog="asyncnet", description="Parallel and asynchronous neural-network execution and training.")
    parser.add_argument("--version", action="version", version=f"asyncnet {__version__}")
    sub = parser.add_subparsers(dest="command", metavar="COMMAND", parser_class=_Parser)
    for name in SUBCOMMANDS:
        importlib.import_module(f"asyncnet.cli.{name}").add_parser(sub)
    return parser


class Terminated(KeyboardInterrupt):
    """SIGTERM, raised where Ctrl-C raises ``KeyboardInterrupt``, so the same clean-up runs."""


class _StopSignals:
    """SIGINT and SIGTERM both stop a command the same way: the first one raises
    ``KeyboardInterrupt`` (``Terminated`` for SIGTERM) in the main thread, so every ``finally``
    and ``except BaseException`` on the way out runs (workers are aborted and joined, shared
    memory and temporary folders removed); a second signal during that clean-up is ignored
    rather than cutting it short with a traceback. The exit status is 128 + the signal number:
    130 for SIGINT, 143 for SIGTERM (kill, systemd, docker stop, Kubernetes)."""

    def __init__(self) -> None:
        self.received: int | None = None
        self._previous: dict[int, object] = {}

    def __enter__(self) -> _StopSignals:
        if threading.current_thread() is threading.main_thread():
            for sig in (signal.SIGINT, signal.SIGTERM):
                self._previous[sig] = signal.signal(sig, self._handle)
        return self

    def _handle(self, signum: int, frame: object) -> None:
        if self.received is not None:
            return
        self.received = signum
        raise Terminated() if signum == signal.SIGTERM else KeyboardInterrupt()

    def __exit__(self, *exc: object) -> None:
        for sig, handler in self._previous.items():
            signal.signal(sig, handler)  # type: ignore[arg-type]


def main(argv: list[str] | None = None) -> int:
    """Run the command line on ``argv`` (default ``sys.argv[1:]``); returns the exit status.

    Called without ``argv`` (as the ``asyncnet`` program) it also flushes stdout inside its
    guard and, on the way out, restores Ctrl-C's default action so that a second Ctrl-C during
    interpreter exit ends the process without a traceback.
    """
    as_program = argv is None
    stop = _StopSignals()
    try:
        with stop:
            try:
                status = _dispatch(argv, stop)
            except SystemExit as e:  # argparse's --help, --version and usage errors
                if not as_program:
                    raise
                status = e.code if isinstance(e.code, int) else int(e.code is not None)
            if as_program:
                sys.stdout.flush()  # a closed pipe shows up here, not in the interpreter's exit
            return status
    except BrokenPipeError:
        if as_program:
            _silence_stdout()
        return EXIT_PIPE
    except KeyboardInterrupt as e:
        return _stopped(stop.received or (signal.SIGTERM if isinstance(e, Terminated) else signal.SIGINT))
    finally:
        if as_program:
            signal.signal(signal.SIGINT, signal.SIG_DFL)


def _dispatch(argv: list[str] | None, stop: _StopSignals) -> int:
    parser = build_parser()
    args = parser.parse_args(argv)
    if getattr(args, "handler", None) is None:
        parser.print_help()
        return EXIT_USAGE
    try:
        return int(args.handler(args) or 0)
    except (CLIError, AsyncNetError) as e:
        if stop.received is not None:  # an error that the interruption itself caused
            return _stopped(stop.received)
        _say(f"asyncnet: error: {_one_line(str(e))}")
        return int(getattr(e, "exit_status", EXIT_ERROR))
    except MemoryError:
        _say("asyncnet: error: out of memory (an input too large for this machine?)")
        return EXIT_ERROR
    except (BrokenPipeError, KeyboardInterrupt):
        raise
    except Exception as e:  # a bug: still one line, with what a report needs
        if os.environ.get("ASYNCNET_DEBUG"):
            raise
        _say(
            f"asyncnet: internal error: {type(e).__name__}: {_one_line(str(e))} "
            "(please report it; ASYNCNET_DEBUG=1 shows the traceback)"
        )
        return EXIT_SOFTWARE


def _one_line(text: str) -> str:
    return " ".join(text.split())


def _say(line: str) -> None:
    """Print one line on stderr; a closed stderr is ignored (there is nowhere left to tell)."""
    try:
        print(line, file=sys.stderr, flush=True)
    except (OSError, ValueError):
        pass


def _silence_stdout() -> None:
    """Point fd 1 at /dev/null so the interpreter's final flush cannot fail on the closed pipe."""
    try:
        devnull = os.open(os.devnull, os.O_WRONLY)
        os.dup2(devnull, sys.stdout.fileno())
        os.close(devnull)
    except (OSError, ValueError):
        pass


def _stopped(signum: int) -> int:
    """One line for SIGINT / SIGTERM; the exit status is 128 + the signal number (130, 143)."""
    _say(f"asyncnet: {'terminated' if signum == signal.SIGTERM else 'interrupted'}")
    return 128 + signum


if __name__ == "__main__":  # pragma: no cover
    sys.exit(main())
