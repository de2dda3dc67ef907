"""Execution plans: steps that run nets in loops and concurrent substeps (Caffe2's ExecutionStep).

A :class:`Plan` is a list of :class:`ExecutionStep` run in order against a workspace. A step
holds either nets (run in order, once per iteration) or substeps. The stop rules are those of
Caffe2's ``plan_executor.cc``:

- ``num_iter``: iterations (default 1). Not allowed together with ``should_stop_blob``;
- ``should_stop_blob``: a one-element bool blob (or anything with ``load()``, such as an
  AtomicBool). The step loops until it is set, and it is checked after *each* net (or each
  sequential substep, or each round of concurrent substeps): the nets after the one that set it
  do not run. Caffe2 does not check it before the first net, so a step whose flag is already
  set still runs its first net once; Caffe2's control flow relies on that (it prepends the net
  that computes the flag);
- ``only_once`` (needs ``should_stop_blob``): at most one iteration each time the step runs;
- ``concurrent_substeps``: each substep runs on its own thread, every iteration; the first
  failure stops the others (the nets running are cancelled, so ops that check
  ``ctx.cancelled()`` return; every thread stops at its next net) and is raised after all are
  joined, with the others attached as ``error.other_errors``;
- a step holding no net (itself or in its substeps) does nothing, whatever its loop (Caffe2's
  Python API drops such steps when they are added).

``Plan.run_async`` / ``ws.run_plan_async`` (Caffe2's ``RunPlanInBackground``) run a plan on a
thread of its own and return a :class:`PlanHandle`.

Nets may be given as :class:`~asyncnet.Net` builders, :class:`~asyncnet.NetDef` s or names of
nets already created in the workspace. As in Caffe2, a plan creates the nets it is given under
their own names in the workspace (replacing a net of that name once per plan run), so
``ws.nets()`` lists them afterwards; two different nets of one name in a plan are an error. One
difference: a net that concurrent substeps run at the same time gets a private instance on
each further thread (Caffe2 would run the one instance concurrently)::

    >>> import numpy as np, asyncnet as an
    >>> from asyncnet.exec import ExecutionStep, Plan
    >>> ws = an.Workspace(); ws.feed("x", np.zeros(1))
    >>> inc = an.Net("inc"); _ = inc.Add(["x", "one"], "x")
    >>> ws.feed("one", np.ones(1))
    >>> plan = Plan("p", [ExecutionStep("loop", nets=[inc], num_iter=5)])
    >>> ws.run_plan(plan); ws.fetch("x"), ws.nets()
    (array([5.]), ['inc'])
"""

from __future__ import annotations

import json
import threading
import time
from collections.abc import Iterable, Sequence
from typing import Any

import numpy as np

from asyncnet.core.defs import NetDef
from asyncnet.core.netbase import NetBase
from asyncnet.errors import ExecutionError, NetBusyError, NetDefinitionError

__all__ = ["ExecutionStep", "Plan", "PlanHandle", "execution_step", "to_execution_step"]

NetSpec = Any  # Net builder | NetDef | str (name of a created net)
UNTIL_STOP = 2**62  # num_iter of a step that loops until its stop blob is set


class ExecutionStep:
    """One step of a plan: nets or substeps, iterated ``num_iter`` times."""

    def __init__(
        self,
        name: str = "",
        nets: NetSpec | Sequence[NetSpec] | None = None,
        substeps: Sequence[ExecutionStep] | None = None,
        num_iter: int | None = None,
        concurrent_substeps: bool = False,
        should_stop_blob: str | None = None,
        only_once: bool = False,
    ):
        if not isinstance(name, str):  # Caffe2's steps may be nameless (plan_executor_test's are)
            raise NetDefinitionError(f"expected a step name (str), got {name!r}", "step.name")
        if nets is not None and not isinstance(nets, (list, tuple)):
            nets = [nets]
        self.name = name
        self.nets: list[NetSpec] = list(nets or [])
        self.substeps: list[ExecutionStep] = list(substeps or [])
        if self.nets and self.substeps:
            raise NetDefinitionError("a step holds nets or substeps, not both", f"step {name!r}")
        for i, s in enumerate(self.substeps):
            if not isinstance(s, ExecutionStep):
                raise NetDefinitionError(
                    f"expected an ExecutionStep, got {type(s).__name__}", f"step {name!r}.substeps[{i}]"
                )
        for i, n in enumerate(self.nets):
            if not (isinstance(n, (str, NetDef)) or hasattr(n, "to_def")):
                raise NetDefinitionError(
                    f"expected a Net, NetDef or net name, got {type(n).__name__}", f"step {name!r}.nets[{i}]"
                )
        if num_iter is not None and (isinstance(num_iter, bool) or not isinstance(num_iter, int) or num_iter < 0):
            raise NetDefinitionError(f"expected a non-negative int, got {num_iter!r}", f"step {name!r}.num_iter")
        should_stop_blob = should_stop_blob or None
        if should_stop_blob is not None and num_iter is not None:
            raise NetDefinitionError(
                f"num_iter={num_iter} and should_stop_blob={should_stop_blob!r} given; "
                "expected one of them (Caffe2: must not specify num_iter if should_stop_blob "
                "is set)",
                f"step {name!r}",
            )
        if only_once and should_stop_blob is None:
            raise NetDefinitionError(
                "only_once=True without should_stop_blob; expected a should_stop_blob "
                "(as in Caffe2, only_once limits a step controlled by a stop blob to one iteration)",
                f"step {name!r}.only_once",
            )
        self.num_iter = num_iter
        self.concurrent_substeps = bool(concurrent_substeps)
        self.should_stop_blob = should_stop_blob
        self.only_once = bool(only_once)

    @property
    def iterations(self) -> int:
        """How many iterations run when no stop blob intervenes (Caffe2's continuation test)."""
        if self.num_iter is not None:
            return self.num_iter
        if self.should_stop_blob:
            return 1 if self.only_once else UNTIL_STOP
        return 1

    def run(self, ws: Any, timeout: float | None = None) -> None:
        """Run this step alone, as a plan of its own name (what Caffe2's RunPlan does with a bare step)."""
        Plan(self.name, [self]).run(ws, timeout=timeout)

    def run_async(self, ws: Any, timeout: float | None = None) -> PlanHandle:
        """Start this step alone on a thread of its own (see :meth:`Plan.run_async`)."""
        return Plan(self.name, [self]).run_async(ws, timeout=timeout)

    # -- JSON ---------------------------------------------------------------------------------
    def to_dict(self) -> dict[str, Any]:
        d: dict[str, Any] = {"name": self.name}
        if self.nets:
            d["nets"] = [_net_to_json(n) for n in self.nets]
        if self.substeps:
            d["substeps"] = [s.to_dict() for s in self.substeps]
        if self.num_iter is not None:
            d["num_iter"] = self.num_iter
        if self.concurrent_substeps:
            d["concurrent_substeps"] = True
        if self.should_stop_blob:
            d["should_stop_blob"] = self.should_stop_blob
        if self.only_once:
            d["only_once"] = True
        return d

    @classmethod
    def from_dict(cls, d: Any, path: str = "step", depth: int = 0) -> ExecutionStep:
        if depth > 64:
            raise NetDefinitionError("steps nested too deeply (more than 64 levels)", path)
        if not isinstance(d, dict):
            raise NetDefinitionError(f"expected an object, got {type(d).__name__}", path)
        allowed = {"name", "nets", "substeps", "num_iter", "concurrent_substeps", "should_stop_blob", "only_once"}
        extra = sorted(str(k) for k in d if k not in allowed)
        if extra:
            raise NetDefinitionError(f"unknown field(s) {extra}; expected some of {sorted(allowed)}", path)
        nets = _expect(d.get("nets", []), list, f"{path}.nets")
        subs = _expect(d.get("substeps", []), list, f"{path}.substeps")
        num_iter = d.get("num_iter")
        if num_iter is not None and (isinstance(num_iter, bool) or not isinstance(num_iter, int)):
            raise NetDefinitionError(f"expected an integer, got {num_iter!r}", f"{path}.num_iter")
        stop = d.get("should_stop_blob")
        if stop is not None and (not isinstance(stop, str) or not stop):
            raise NetDefinitionError(f"expected a blob name, got {stop!r}", f"{path}.should_stop_blob")
        try:
            return cls(
                _expect(d.get("name", ""), str, f"{path}.name"),
                nets=[_net_from_json(n, f"{path}.nets[{i}]") for i, n in enumerate(nets)],
                substeps=[cls.from_dict(s, f"{path}.substeps[{i}]", depth + 1) for i, s in enumerate(subs)],
                num_iter=num_iter,
                concurrent_substeps=_expect(d.get("concurrent_substeps", False), bool, f"{path}.concurrent_substeps"),
                should_stop_blob=stop,
                only_once=_expect(d.get("only_once", False), bool, f"{path}.only_once"),
            )
        except NetDefinitionError as e:
            if e.path and e.path.startswith(path):
                raise
            raise NetDefinitionError(str(e), path) from None

    def __repr__(self) -> str:
        what = f"nets={len(self.nets)}" if self.nets else f"substeps={len(self.substeps)}"
        return f"ExecutionStep({self.name!r}, {what}, num_iter={self.num_iter})"


def execution_step(name: str, nets_or_steps: Any = None, **kwargs: Any) -> ExecutionStep:
    """Caffe2's ``core.execution_step``: a step of nets, or of substeps.

    ``nets_or_steps`` is None (an empty step), a net, a step (it becomes the one substep), or a
    list: of nets only (the step runs them), else each item becomes a substep (a net is wrapped
    in a step of its name, as Caffe2's ``to_execution_step`` does)::

        >>> step = execution_step("loop", [ExecutionStep("a"), "net_b"], num_iter=2)
        >>> [(s.name, s.nets) for s in step.substeps], step.num_iter
        ([('a', []), ('net_b', ['net_b'])], 2)
    """
    if nets_or_steps is None:
        return ExecutionStep(name, **kwargs)
    if isinstance(nets_or_steps, ExecutionStep):
        return ExecutionStep(name, substeps=[nets_or_steps], **kwargs)
    items = list(nets_or_steps) if isinstance(nets_or_steps, (list, tuple)) else [nets_or_steps]
    if not any(isinstance(s, ExecutionStep) for s in items):
        return ExecutionStep(name, nets=items, **kwargs)
    return ExecutionStep(name, substeps=[to_execution_step(s) for s in items], **kwargs)


def to_execution_step(step_or_nets: Any, default_name: str | None = None) -> ExecutionStep:
    """Caffe2's ``core.to_execution_step``: a step as it is; nets become a step named after
    ``default_name`` or the (first) net."""
    if isinstance(step_or_nets, ExecutionStep):
        return step_or_nets
    if default_name is None:
        first = step_or_nets[0] if isinstance(step_or_nets, (list, tuple)) and step_or_nets else step_or_nets
        default_name = first if isinstance(first, str) else getattr(first, "name", None)
    if not isinstance(default_name, str):
        raise NetDefinitionError(f"expected a step, a net or a list of nets, got {type(step_or_nets).__name__}", "step")
    return execution_step(default_name, step_or_nets)


class Plan:
    """A named list of steps run in order by ``ws.run_plan(plan)`` (or ``plan.run(ws)``).
    ``Plan(step)`` is a plan of that one step, named after it (as Caffe2's ``core.Plan``)."""

    def __init__(self, name: str | ExecutionStep, steps: Iterable[ExecutionStep] = ()):
        if isinstance(name, ExecutionStep):  # Caffe2's Plan(step): a plan of that one step, named after it
            steps, name = [name, *steps], name.name
        if not isinstance(name, str):  # any str, "" too (Caffe2's Plan names are labels)
            raise NetDefinitionError(f"expected a plan name (str), got {name!r}", "plan.name")
        self.name = name
        self.steps: list[ExecutionStep] = []
        for s in steps:
            self.add_step(s)

    def add_step(self, step: ExecutionStep) -> ExecutionStep:
        if not isinstance(step, ExecutionStep):
            raise NetDefinitionError(
                f"expected an ExecutionStep, got {type(step).__name__}", f"plan {self.name!r}.steps"
            )
        self.steps.append(step)
        return step

    AddStep = add_step

    def run(self, ws: Any, timeout: float | None = None) -> None:
        """Run every step in order against workspace ``ws``; raise the first failure.

        ``timeout`` bounds the whole plan: it is checked between net runs and passed to each
        net run; on expiry every thread is stopped and joined and TimeoutError is raised.
        """
        self._runner(ws, timeout).run_steps(self.steps)

    def run_async(self, ws: Any, timeout: float | None = None) -> PlanHandle:
        """Start the plan on a thread of its own and return a :class:`PlanHandle` at once
        (Caffe2's ``RunPlanInBackground``); a malformed plan raises here, before the start."""
        return PlanHandle(self._runner(ws, timeout), self.steps, self.name)

    def _runner(self, ws: Any, timeout: float | None) -> _PlanRun:
        return _PlanRun(
            ws, _net_defs_by_name(self.steps), None if timeout is None else time.perf_counter() + timeout, timeout
        )

    # -- JSON ---------------------------------------------------------------------------------
    def to_dict(self) -> dict[str, Any]:
        return {"name": self.name, "steps": [s.to_dict() for s in self.steps]}

    def to_json(self, indent: int | None = 2) -> str:
        return json.dumps(self.to_dict(), indent=indent, allow_nan=False)

    @classmethod
    def from_dict(cls, d: Any) -> Plan:
        if not isinstance(d, dict):
            raise NetDefinitionError(f"expected an object, got {type(d).__name__}", "plan")
        extra = sorted(str(k) for k in d if k not in {"name", "steps"})
        if extra:
            raise NetDefinitionError(f"unknown field(s) {extra}; expected some of ['name', 'steps']", "plan")
        steps = _expect(d.get("steps", []), list, "steps")
        return cls(
            _expect(d.get("name", ""), str, "name"),
            [ExecutionStep.from_dict(s, f"steps[{i}]") for i, s in enumerate(steps)],
        )

    @classmethod
    def from_json(cls, text: str | bytes) -> Plan:
        """Parse and validate JSON text; any defect raises :class:`NetDefinitionError`."""
        try:
            data = json.loads(text, parse_constant=_reject_constant)
        except NetDefinitionError:
            raise
        except (ValueError, TypeError, RecursionError) as e:
            raise NetDefinitionError(f"invalid JSON: {e}") from None
        return cls.from_dict(data)

    def __repr__(self) -> str:
        return f"Plan({self.name!r}, steps={len(self.steps)})"


class PlanHandle:
    """A plan running on its own thread: ``wait(timeout)`` / ``result(timeout)`` (raise the
    plan's first failure, or TimeoutError while it runs), ``done()``, ``exception(timeout)``,
    ``cancel()`` (stop every step at its next net, cancel the nets running; ``wait`` then raises
    ExecutionError), and Caffe2's ``is_done()`` / ``is_succeeded()``. Wait for the handle before
    the workspace is closed: the thread is a daemon thread only so that a plan stuck in an op
    that never returns cannot keep the interpreter from exiting."""

    def __init__(self, runner: _PlanRun, steps: Sequence[ExecutionStep], name: str):
        self._runner = runner
        self._error: BaseException | None = None
        self._cancelled = False
        self._done = threading.Event()
        self._thread = threading.Thread(
            target=self._body, args=(list(steps),), name=f"asyncnet-plan-{name}", daemon=True
        )
        self._thread.start()

    def _body(self, steps: list[ExecutionStep]) -> None:
        try:
            self._runner.run_steps(steps)
        except BaseException as exc:  # noqa: BLE001 - handed to the caller through wait()
            self._error = exc
        finally:
            if self._cancelled and self._error is None:
                self._error = ExecutionError("the plan was cancelled")
            self._done.set()

    def done(self) -> bool:
        return self._done.is_set()

    def wait(self, timeout: float | None = None) -> None:
        if not self._done.wait(timeout):
            raise TimeoutError(f"the plan did not finish within {timeout} s")
        self._thread.join()
        if self._error is not None:
            raise self._error

    result = wait

    def exception(self, timeout: float | None = None) -> BaseException | None:
        """The error ``wait`` raises, None on success (TimeoutError while the plan runs on)."""
        try:
            self.wait(timeout)
        except TimeoutError:
            if not self.done():
                raise
            return self._error
        except BaseException as exc:  # noqa: BLE001 - returned, as Future.exception does
            return exc
        return None

    def cancel(self) -> bool:
        """Stop the plan (True if it was still running)."""
        if self.done():
            return False
        self._cancelled = True
        self._runner.stop_all()
        return True

    def is_done(self) -> bool:  # Caffe2's BackgroundPlan
        return self.done()

    def is_succeeded(self) -> bool:
        return self.done() and self._error is None


def _net_defs_by_name(steps: Iterable[ExecutionStep]) -> dict[str, NetDef]:
    """Every net a plan is given (not by name), by name; two different nets of one name are an error."""
    found: dict[str, NetDef] = {}
    todo = list(steps)
    while todo:
        step = todo.pop()
        todo.extend(step.substeps)
        for spec in step.nets:
            if isinstance(spec, str):
                continue
            net_def = spec if isinstance(spec, NetDef) else spec.to_def()
            seen = found.setdefault(net_def.name, net_def)
            if seen is not net_def and seen.to_dict() != net_def.to_dict():
                raise NetDefinitionError(
                    f"the plan holds two different nets named {net_def.name!r}; expected one "
                    "definition per name (Caffe2 refuses it too)",
                    f"step {step.name!r}.nets",
                )
    return found


class _PlanRun:
    """The state of one plan run: net instances, the stop signal.

    A *lane* is the position of a thread in the tree of concurrent substeps (a tuple of substep
    indices). The first lane that runs a net the plan was given creates it in the workspace
    under its name (Caffe2's CreateNet with overwrite, once per plan run); another lane that
    runs the same net gets a private instance, closed at the end, instead of a NetBusyError.
    """

    def __init__(self, ws: Any, defs: dict[str, NetDef], deadline: float | None, timeout: float | None):
        self.ws = ws
        self.defs = defs
        self.deadline = deadline
        self.timeout = timeout
        self.stop = threading.Event()  # set by the first failure: every thread winds down
        self.owner: dict[str, tuple[int, ...]] = {}  # net name -> the lane using the workspace's instance
        self.owned: dict[tuple[str, tuple[int, ...]], NetBase] = {}  # private instances of other lanes
        # blobs the plan's nets write: Caffe2 creates them (uninitialized) with the nets, and an
        # uninitialized stop blob reads as "not set"; any other missing stop blob is an error
        self.written = {o for d in defs.values() for op in d.ops for o in op.outputs}
        self.running: set[NetBase] = set()  # nets running now on behalf of this plan
        self.cancelled: set[NetBase] = set()  # runs cancelled by the stop (their error is not news)
        self.lock = threading.Lock()
        self.empty: dict[int, bool] = {}  # id(step) -> no net in it (the steps live as long as the run)

    def run_steps(self, steps: Iterable[ExecutionStep]) -> None:
        """Run ``steps`` in order (a plan's top level), then close the private net instances."""
        try:
            for step in steps:
                self.run_step(step, "", ())
        finally:
            self.close()

    def close(self) -> None:
        for (name, lane), net in self.owned.items():
            if self.owner.get(name) != lane:  # the workspace's instances stay, as in Caffe2
                net.close()

    def remaining(self) -> float | None:
        if self.deadline is None:
            return None
        left = self.deadline - time.perf_counter()
        if left <= 0:
            raise TimeoutError(f"plan did not finish within {self.timeout} s")
        return left

    def nets_of(self, step: ExecutionStep, lane: tuple[int, ...]) -> list[NetBase]:
        """Instances for a step's nets: the workspace's for the first lane, private ones for the others."""
        out = []
        for spec in step.nets:
            if isinstance(spec, str):
                named = self.ws.net(spec)
                with self.lock:
                    self.written.update(o for op in named.definition.ops for o in op.outputs)
                out.append(named)
                continue
            name = spec.name
            with self.lock:
                owner = self.owner.setdefault(name, lane)
                if owner == lane:
                    net = self.owned.get((name, lane))
                    if net is None:  # created in the workspace once per plan run
                        net = self.owned[(name, lane)] = self.ws.create_net(self.defs[name], overwrite=True)
                else:
                    net = self.owned.get((name, lane))
                    if net is None:
                        net = self.owned[(name, lane)] = self.ws.instantiate(self.defs[name])
            out.append(net)
        return out

    def run_net(self, net: NetBase) -> None:
        """One run of ``net``, cancellable by :meth:`stop_all` while it runs."""
        with self.lock:
            if self.stop.is_set():
                return
            self.running.add(net)
        try:
            net.run(self.remaining())
        except NetBusyError:
            raise
        except ExecutionError:
            with self.lock:
                stopped = net in self.cancelled
            if not stopped:
                raise
        finally:
            with self.lock:
                self.running.discard(net)
                self.cancelled.discard(net)

    def stop_all(self) -> None:
        """The first failure: stop every thread at its next net, and cancel the async runs in flight."""
        with self.lock:
            self.stop.set()
            running = list(self.running)
        for net in running:
            cancel = getattr(net, "cancel", None)
            if cancel is not None:
                with self.lock:
                    self.cancelled.add(net)
                cancel()

    def run_step(self, step: ExecutionStep, path: str, lane: tuple[int, ...]) -> None:
        """Caffe2's ExecuteStepRecursive: the stop blob is checked after each net or substep."""
        if self.is_empty(step):
            return  # a step with no net in it does nothing (Caffe2's AddStep/AddSubstep drop it), whatever its loop
        where = f"{path}/{step.name}" if path else step.name
        nets = self.nets_of(step, lane) if step.nets else []
        stop_blob = step.should_stop_blob
        concurrent = step.concurrent_substeps and len(step.substeps) > 1
        for _ in range(step.iterations):
            if self.stop.is_set():
                return
            self.remaining()  # the deadline also bounds steps that run no net
            if concurrent:
                self.run_concurrent(step.substeps, where, lane)
                if stop_blob and self.should_stop(stop_blob, where):
                    return
                continue
            for item in nets or step.substeps:
                if isinstance(item, ExecutionStep):
                    self.run_step(item, where, lane)
                else:
                    self.run_net(item)
                if self.stop.is_set():
                    return
                if stop_blob and self.should_stop(stop_blob, where):
                    return

    def is_empty(self, step: ExecutionStep) -> bool:
        """Whether ``step`` holds no net, itself or in any substep (remembered per step object)."""
        known = self.empty.get(id(step))
        if known is None:
            known = self.empty[id(step)] = not step.nets and all(self.is_empty(s) for s in step.substeps)
        return known

    def run_concurrent(self, substeps: Sequence[ExecutionStep], where: str, lane: tuple[int, ...]) -> None:
        """Each substep on its own thread; all joined; the first failure in time is raised."""
        errors: list[tuple[float, BaseException]] = []
        elock = threading.Lock()

        def body(sub: ExecutionStep, k: int) -> None:
            try:
                self.run_step(sub, where, lane + (k,))
            except BaseException as exc:  # noqa: BLE001 - raised by the parent after the join
                with elock:
                    errors.append((time.perf_counter(), exc))
                self.stop_all()

        threads = [
            threading.Thread(target=body, args=(s, k), name=f"asyncnet-step-{where}/{s.name}")
            for k, s in enumerate(substeps)
        ]
        started = []
        try:
            for t in threads:
                t.start()
                started.append(t)
        finally:
            if len(started) < len(threads):
                self.stop_all()
            for t in started:
                t.join()
        if errors:
            errors.sort(key=lambda e: e[0])
            first = errors[0][1]
            others = [e for _, e in errors[1:]]
            first.other_errors = others  # type: ignore[attr-defined]
            if others and hasattr(first, "add_note"):
                first.add_note(
                    f"{len(others)} other concurrent substep(s) of {where!r} failed too: "
                    + "; ".join(f"{type(e).__name__}: {e}" for e in others[:3])
                )
            raise first

    def should_stop(self, blob: str, where: str) -> bool:
        try:
            value = self.ws.fetch(blob)
        except KeyError:
            if blob in self.written:  # Caffe2's getShouldStop: an uninitialized blob is false
                return False
            raise ExecutionError(
                f"step {where!r}: should_stop_blob {blob!r} does not exist and no net of the plan writes it"
            ) from None
        return _truthy(value, blob, where)


def _truthy(value: Any, blob: str, where: str) -> bool:
    """Caffe2's getShouldStop: a scalar boolean (a one-element bool array or tensor), or an atomic's ``load()``."""
    load = getattr(value, "load", None)
    if callable(load):
        return bool(load())
    if isinstance(value, (bool, np.bool_)):
        return bool(value)
    arr = value if hasattr(value, "numel") else np.asarray(value)
    size = arr.numel() if hasattr(arr, "numel") else arr.size
    is_bool = str(arr.dtype) in ("bool", "torch.bool")
    if size != 1 or not is_bool:
        raise ExecutionError(
            f"step {where!r}: should_stop_blob {blob!r} must hold one bool (Caffe2: expects a scalar "
            f"boolean), got dtype {arr.dtype} shape {tuple(arr.shape)}"
        )
    return bool(arr.reshape(()).item())


def _net_to_json(spec: NetSpec) -> Any:
    if isinstance(spec, str):
        return spec
    if isinstance(spec, NetDef):
        return spec.to_dict()
    return spec.to_def().to_dict()


def _net_from_json(d: Any, path: str) -> NetSpec:
    if isinstance(d, str) and d:
        return d
    if isinstance(d, dict):
        try:
            return NetDef.from_dict(d)
        except NetDefinitionError as e:
            raise NetDefinitionError(str(e), path) from None
    raise NetDefinitionError(f"expected a net name or a net object, got {type(d).__name__}", path)


def _expect(v: Any, typ: type, path: str) -> Any:
    if not isinstance(v, typ) or (typ is not bool and isinstance(v, bool)):
        raise NetDefinitionError(f"expected {typ.__name__}, got {type(v).__name__}", path)
    return v


def _reject_constant(name: str) -> Any:
    raise NetDefinitionError(f"invalid JSON: {name} is not allowed")
