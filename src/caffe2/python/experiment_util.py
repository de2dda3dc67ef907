"""Caffe2's ``experiment_util.ModelTrainerLog``: a CSV log of training progress.

The file ``<expname>_<YYYYmmdd_HHMMSS>.log`` starts with the run's arguments, then a header line
and one line per :meth:`ModelTrainerLog.log` call (time spent, input counts, inputs per second,
then the additional values in name order)::

    >>> import os, tempfile
    >>> from caffe2.python import experiment_util
    >>> here = os.getcwd(); os.chdir(tempfile.mkdtemp())
    >>> log = experiment_util.ModelTrainerLog("run", {"lr": 0.1})
    >>> log.log(input_count=64, batch_count=1, additional_values={"loss": 2.3})
    >>> open(log.filename).read().splitlines()[1].split(",")[-1]
    'loss'
    >>> os.chdir(here)
"""

from __future__ import annotations

import datetime
import logging
import socket
import time
from collections import OrderedDict
from typing import Any

__all__ = ["ExternalLogger", "ModelTrainerLog"]


class ExternalLogger:
    """What an external logger provides: ``set_runtime_args(args)`` and ``log(logdict)``."""

    def set_runtime_args(self, runtime_args: dict[str, Any]) -> None:
        raise NotImplementedError

    def log(self, log_dict: dict[str, Any]) -> None:
        raise NotImplementedError


class ModelTrainerLog:
    """Appends training progress to ``<expname>_<timestamp>.log`` (and to external loggers)."""

    def __init__(self, expname: str, runtime_args: Any, external_loggers: list[Any] | None = None):
        now = datetime.datetime.fromtimestamp(time.time())
        self.experiment_id = f"{expname}_{now.strftime('%Y%m%d_%H%M%S')}"
        self.filename = f"{self.experiment_id}.log"
        self.logstr(f"# {runtime_args}")
        self.headers: list[str] | None = None
        self.start_time = self.last_time = time.time()
        self.last_input_count = 0
        self.external_loggers = list(external_loggers or [])
        if self.external_loggers:
            args = dict(runtime_args) if isinstance(runtime_args, dict) else dict(vars(runtime_args))
            args["experiment_id"] = self.experiment_id
            args["hostname"] = socket.gethostname()
            for logger in self.external_loggers:
                logger.set_runtime_args(args)

    def logstr(self, text: str) -> None:
        with open(self.filename, "a", encoding="utf-8") as f:
            f.write(text + "\n")
        logging.getLogger("experiment_logger").info(text)

    def log(self, input_count: int, batch_count: int, additional_values: dict[str, Any]) -> None:
        now = time.time()
        delta_t, delta_count = now - self.last_time, input_count - self.last_input_count
        self.last_time, self.last_input_count = now, input_count
        d: OrderedDict[str, Any] = OrderedDict()
        d["time_spent"] = delta_t
        d["cumulative_time_spent"] = now - self.start_time
        d["input_count"] = delta_count
        d["cumulative_input_count"] = input_count
        d["cumulative_batch_count"] = batch_count
        d["inputs_per_sec"] = delta_count / delta_t if delta_t > 0 else 0.0
        for k in sorted(additional_values):
            d[k] = additional_values[k]
        if self.headers is None:
            self.headers = list(d)
            self.logstr(",".join(self.headers))
        self.logstr(",".join(str(v) for v in d.values()))
        for logger in self.external_loggers:
            try:
                logger.log(d)
            except Exception as e:  # noqa: BLE001 - an external logger must not stop training (Caffe2's rule)
                logging.warning("Failed to call ExternalLogger: %s", e)
