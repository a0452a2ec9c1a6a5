"""Per-op statistics and the trace of intercepted calls.

Every call that a dmlshim wrapper handles (i.e. that touches a tensor on the target
device) is counted under its op name (the aten overload of a dispatcher kernel, e.g.
``aten::mul.Tensor``, else the patched entry point, e.g. ``torch.hypot``) with the action
taken: ``pass`` (the original ran on the device), ``coerce`` (arguments fixed on the device),
``cpu`` (ran on the CPU, results came back; bytes counted), ``island`` (a dtype the
device cannot hold stayed on the CPU: ``dmlshim.islands``), ``error`` (the call raised).

A call's seconds are split into ``own`` (the original op, run on the device: :func:`timed`,
:func:`own`, a dispatcher kernel's redispatch), ``substitute`` (work done instead of
DirectML or besides it: CPU runs with their copies, device ops a fix marks with
:func:`substitute`) and ``overhead`` (the rest: Python, checks, host reads).  A region
inside another counts once; a handled call nested in another counts in its own row only.
Details: docs/configuration.md ("Tracing and report()"), docs/internals.md.

Tracing (``DMLSHIM_TRACE``) adds one record per call: on logger ``dmlshim`` at INFO
level, or as one JSON object per line in a file.  Records hold op, action, input
shapes, dtypes and devices, microseconds (``us``; its parts ``us_own``,
``us_substitute``, ``us_overhead``) and bytes moved; never tensor values.
"""
from __future__ import annotations

import atexit
import contextvars
import functools
import json
import logging
import sys
import threading
import time
from collections import Counter
from dataclasses import dataclass, field
from typing import Any, Callable, Dict, Iterator, List, Optional, Tuple

import torch

from . import _torch_compat

logger = logging.getLogger("dmlshim")

ACTIONS = ("pass", "coerce", "cpu", "island", "error")


@dataclass
class OpStats:
    """Totals for one op.  ``seconds`` is wall time inside the wrapper (less handled calls
    nested in it), split into ``own`` + ``substitute`` + ``overhead`` (module docstring),
    all in seconds; bytes are host->device (``h2d``) and device->host (``d2h``) copies made
    by the shim."""

    calls: int = 0
    actions: Counter = field(default_factory=Counter)
    seconds: float = 0.0
    h2d: int = 0
    d2h: int = 0
    own: float = 0.0
    substitute: float = 0.0
    overhead: float = 0.0


_lock = threading.Lock()
_stats: Dict[str, OpStats] = {}
# device-to-host reads, by whose code made them: ("model" | "dmlshim", op) -> [reads, bytes]
_syncs: Dict[Tuple[str, str], List[int]] = {}
_caches: Dict[str, Callable[[], "tuple[int, int]"]] = {}   # name -> () -> (tensors, bytes)
_current: contextvars.ContextVar = contextvars.ContextVar("dmlshim_call", default=None)   # begin()'s list
_sink: Optional[Callable[[dict], None]] = None
_sink_close: Optional[Callable[[], None]] = None
_own_handler: Optional[logging.Handler] = None
_atexit_registered = False


# --------------------------------------------------------------------------- recording

_clock = time.perf_counter


# A handled call's counters while it runs (``_current``), a list for speed (a kernel of the
# dispatcher makes one per call): bytes moved, seconds of its own and substitute regions and
# of the handled calls nested in it, whether a region is open (inner ones then count in it),
# and, from begin(), its start and context token.
H2D, D2H, OWN, SUB, NESTED, REGION, START, TOKEN = range(8)


def begin() -> list:
    """Open a handled call: its counters become current until :func:`end`.  For kernels
    that time themselves (``dispatcher.fix_kernel``, ``_select.pass_on``); ``call`` does
    this around a handler."""
    c = [0, 0, 0.0, 0.0, 0.0, False, 0.0, None]
    c[TOKEN] = _current.set(c)
    c[START] = _clock()
    return c


def end(c: list, op: Optional[str], action: str = "pass", args=(), kwargs=None, *,
        passed: Optional[list] = None) -> None:
    """Close ``c`` (from :func:`begin`) and count it under ``op`` and ``action``; ``op``
    None: no row (a kernel that passed the call through): see :func:`unrecorded`."""
    wall = _clock() - c[START]
    _current.reset(c[TOKEN])
    if op is None:
        unrecorded(c, wall, passed)
        return
    _record(op, action, wall, c, args, kwargs)


def unrecorded(c: list, wall: float, passed: Optional[list] = None) -> None:
    """``c``, no longer current, of ``wall`` seconds, gets no row.  With ``passed`` (a
    Python kernel that looked at a device call and passed it through, or ran it without a
    row: ``refused``'s retry, ``int_range``'s bookkeeping; its call of the op marked
    :func:`own`): its checks (``wall`` less its nested rows and regions) are overhead
    counted there (:func:`passed_counter`), which the enclosing call leaves out of its
    seconds; its regions' time stays in the enclosing call's.  Without: only its nested
    rows are left out."""
    regions = c[OWN] + c[SUB]
    if passed is not None:
        passed[0] += 1
        passed[1] += max(wall - c[NESTED] - regions, 0.0)
    parent = _current.get()
    if parent is not None:
        parent[NESTED] += wall - regions if passed is not None else c[NESTED]


# op -> [calls, seconds]: dmlshim's Python kernels that looked at a device call and made no
# row, their checks' time, which is overhead in no row; the kernels add to their lists
# without the lock (reset() zeroes them in place).
_passed: Dict[str, list] = {}


def passed_counter(op: str) -> list:
    """The ``[calls, seconds]`` a Python kernel of ``op`` adds its passed-through calls to
    (:func:`unrecorded`); ``report().passed`` shows them."""
    with _lock:
        return _passed.setdefault(op, [0, 0.0])


class _Region:
    """``with own():`` / ``with substitute():``: the block's time goes to that part of the
    current handled call, unless a region is open already (nested regions count once) or
    no call is handled."""

    __slots__ = ("substitute", "call", "start", "nested")

    def __init__(self, substitute: bool):
        self.substitute = substitute

    def __enter__(self):
        c = _current.get()
        if c is None or c[REGION]:
            self.call = None
            return self
        c[REGION] = True
        self.call, self.nested, self.start = c, c[NESTED], _clock()
        return self

    def __exit__(self, *exc):
        c = self.call
        if c is not None:
            c[SUB if self.substitute else OWN] += _clock() - self.start - (c[NESTED] - self.nested)
            c[REGION] = False
        return False


def substitute() -> _Region:
    """``with trace.substitute():`` marks work dmlshim does instead of DirectML or besides
    it (device ops a fix computes in place of the original, a CPU run and its copies): its
    seconds count as the handled call's ``substitute``, not its ``overhead``."""
    return _Region(True)


def region(substitute: bool, func: Callable, *args, **kwargs):
    """``func(*args, **kwargs)`` as a :func:`substitute` (True) or :func:`own` region, in one
    Python call: a hot fix's (``mul``'s cast, its fixed call)."""
    c = _current.get()
    if c is None or c[REGION]:
        return func(*args, **kwargs)
    c[REGION] = True
    nested, start = c[NESTED], _clock()
    try:
        return func(*args, **kwargs)
    finally:
        c[SUB if substitute else OWN] += _clock() - start - (c[NESTED] - nested)
        c[REGION] = False


def own() -> _Region:
    """``with trace.own():`` marks the original op itself, run on the device (a fix's call of
    what it amends): its seconds count as the handled call's ``own``."""
    return _Region(False)


def timed(func: Callable) -> Callable:
    """``func`` whose calls count as ``own`` time of the handled call they are made in
    (outside any other region); named as ``func``.  Made once per wrapper: what an
    ``intercept`` handler gets as ``func``."""
    def timed_func(*args, **kwargs):
        with _Region(False):
            return func(*args, **kwargs)
    functools.update_wrapper(timed_func, func, functools.WRAPPER_ASSIGNMENTS + ("__objclass__",), ())
    return timed_func


def moved(h2d: int = 0, d2h: int = 0) -> None:
    """Add bytes copied host->device / device->host to the call being handled."""
    c = _current.get()
    if c is not None:
        c[H2D] += h2d
        c[D2H] += d2h


def nbytes(t: torch.Tensor) -> int:
    return t.numel() * t.element_size()


def to_host(x):
    """``x.cpu()`` for a device tensor, its bytes a device-to-host read of the call being
    handled (:func:`moved`: ``report().syncs["dmlshim"]``); anything else as is."""
    if not isinstance(x, torch.Tensor) or x.is_cpu:
        return x
    moved(d2h=nbytes(x))
    return x.cpu()


def call(op: str, handler, func, args, kwargs):
    """Run ``handler(func, args, kwargs) -> (action, result)``, count it, trace it.  Calls of
    ``func`` count as ``own`` time where ``func`` is :func:`timed`; a CPU run inside the
    handler (``fallback.run_on_cpu``) as ``substitute``; the rest as ``overhead``."""
    c = begin()
    action = "error"
    try:
        action, result = handler(func, args, kwargs)
        return result
    finally:
        end(c, op, action, args, kwargs)


def _record(op: str, action: str, wall: float, c: list, args, kwargs) -> None:
    own_s, sub_s = c[OWN], c[SUB]
    seconds = max(wall - c[NESTED], own_s + sub_s)
    record(op, action, seconds, c[H2D], c[D2H], args, kwargs, own=own_s, substitute=sub_s, wall=wall)


def record(op: str, action: str, seconds: float, h2d: int = 0, d2h: int = 0, args=(), kwargs=None, *,
           own: float = 0.0, substitute: float = 0.0, wall: Optional[float] = None) -> None:
    """Count one handled call of ``op`` (and trace it when tracing is on): ``seconds`` of
    wall time, of which ``own`` and ``substitute`` seconds (the rest is overhead); bytes
    ``h2d``/``d2h``.  Made inside another handled call, its ``wall`` seconds (default
    ``seconds``) are left out of that call's."""
    parent = _current.get()
    if parent is not None:
        parent[NESTED] += seconds if wall is None else wall
    overhead = max(seconds - own - substitute, 0.0)
    with _lock:
        stats = _stats.get(op)
        if stats is None:
            stats = _stats[op] = OpStats()
        stats.calls += 1
        stats.actions[action] += 1
        stats.seconds += seconds
        stats.own += own
        stats.substitute += substitute
        stats.overhead += overhead
        stats.h2d += h2d
        stats.d2h += d2h
        if d2h:                             # the shim's own work read the device
            _count_sync("dmlshim", op, d2h)
    sink = _sink
    if sink is not None:
        sink({"op": op, "action": action, "inputs": describe(args, kwargs),
              "us": round(seconds * 1e6, 1), "us_own": round(own * 1e6, 1),
              "us_substitute": round(substitute * 1e6, 1), "us_overhead": round(overhead * 1e6, 1),
              "h2d": h2d, "d2h": d2h})


def synced(op: str, nbytes: int) -> None:
    """Count one device-to-host read the model's own code made (``.cpu()``, ``.item()``
    of a device tensor; the dispatcher net's watchers call this)."""
    with _lock:
        _count_sync("model", op, nbytes)


def _count_sync(who: str, op: str, nbytes: int) -> None:
    counts = _syncs.setdefault((who, op), [0, 0])
    counts[0] += 1
    counts[1] += nbytes


def describe(args, kwargs=None) -> List[dict]:
    """Shape, dtype and device of every tensor in ``args``/``kwargs`` (nested lists
    included), in order.  Never values."""
    return [{"shape": list(t.shape), "dtype": str(t.dtype).replace("torch.", ""), "device": str(t.device)}
            for t in tensors_in((args, kwargs or {}))]


def tensors_in(obj: Any) -> Iterator[torch.Tensor]:
    """Yield every tensor in nested lists/tuples/dicts, in order."""
    if isinstance(obj, torch.Tensor):
        yield obj
    elif isinstance(obj, (list, tuple)):
        for x in obj:
            yield from tensors_in(x)
    elif isinstance(obj, dict):
        for x in obj.values():
            yield from tensors_in(x)


def register_cache(name: str, sizer: Callable[[], "tuple[int, int]"]) -> None:
    """Show a shim-owned cache in ``report()``: ``sizer() -> (tensors, bytes)``."""
    _caches[name] = sizer


# --------------------------------------------------------------------------- counting

_counted: Counter = Counter()      # counting()'s totals since reset(): "device", "cpu"


def _cpu_calls() -> int:
    """The calls dmlshim has run on the CPU so far (``cpu`` and ``island`` actions)."""
    with _lock:
        return sum(s.actions["cpu"] + s.actions["island"] for s in _stats.values())


def counting(device_type: str = "privateuseone"):
    """``with dmlshim.trace.counting() as ops:`` counts the aten calls made inside: ``ops.device``
    those with a tensor on ``device_type`` among their arguments or results (dmlshim's own
    included), ``ops.cpu`` the calls dmlshim ran on the CPU instead (``cpu`` and ``island``
    actions); both are added to :func:`report`'s ``ops``.  A ``TorchDispatchMode``: every call
    inside pays its Python (microseconds), so it is for a measuring run, not a timed one
    (``benchmarks/model_syncs.py`` counts in a run of its own)."""
    TorchDispatchMode = _torch_compat.dispatch_mode_class()
    if TorchDispatchMode is None:
        raise RuntimeError("dmlshim.trace.counting() needs torch.utils._python_dispatch."
                           f"TorchDispatchMode, which torch {torch.__version__} lacks")

    class OpCounter(TorchDispatchMode):
        def __init__(self):
            super().__init__()
            self.device, self.cpu, self._cpu_before = 0, 0, 0

        def __torch_dispatch__(self, func, types, args=(), kwargs=None):
            out = func(*args, **(kwargs or {}))
            if any(t.device.type == device_type for t in tensors_in((args, kwargs or {}, out))):
                self.device += 1
            return out

        def __enter__(self):
            self._cpu_before = _cpu_calls()
            return super().__enter__()

        def __exit__(self, *exc):
            done = super().__exit__(*exc)
            self.cpu = _cpu_calls() - self._cpu_before
            with _lock:
                _counted["device"] += self.device
                _counted["cpu"] += self.cpu
            return done
    return OpCounter()


# --------------------------------------------------------------------------- report

class Report:
    """Snapshot of the per-op stats.  ``str(report)`` is a table; ``rows``, ``totals`` and
    ``caches`` hold the same numbers for programs (seconds, bytes).

    A row: ``op``, ``calls``, ``actions`` (``{action: calls}``), ``seconds`` (wall time
    inside dmlshim for the op, less handled calls nested in it) and its parts ``own``,
    ``substitute`` and ``overhead`` (seconds; module docstring), ``h2d``/``d2h`` (bytes).
    ``passed``: ``{op: {"calls", "seconds"}}``, dmlshim's Python kernels that looked at a
    device call and passed it through (no row): their time is overhead too.  ``totals``:
    :func:`totals` of both; each second is counted once.  ``ops``: the aten calls
    :func:`counting` counted (``{"device", "cpu"}``), empty where none ran."""

    def __init__(self, rows: List[dict], caches: Dict[str, dict], defects: Optional[dict] = None,
                 syncs: Optional[Dict[str, Dict[str, dict]]] = None, passed: Optional[Dict[str, dict]] = None,
                 ops: Optional[Dict[str, int]] = None):
        self.rows = rows
        self.passed = passed or {}
        # aten calls counted by counting(): {"device": n, "cpu": m}, empty if none ran
        self.ops = ops or {}
        self.caches = caches
        self.defects = defects            # dmlshim.probing.Detection.to_dict() of activate()
        # device-to-host reads: {"model": {op: {"reads", "bytes"}}, "dmlshim": {...}}
        self.syncs = syncs if syncs is not None else {"model": {}, "dmlshim": {}}

    @property
    def totals(self) -> dict:
        """Sums over ``rows``: calls, seconds, own, substitute, overhead (seconds), h2d, d2h
        (bytes)."""
        return totals(self.rows, self.passed)

    def to_dict(self) -> dict:
        return {"ops": self.rows, "totals": self.totals, "passed": self.passed, "caches": self.caches,
                "defects": self.defects, "syncs": self.syncs, "counted": self.ops}

    def brief(self) -> "Report":
        """The same counts without the table of probed defects (the examples' default)."""
        return Report(self.rows, self.caches, None, self.syncs, self.passed, self.ops)

    def __str__(self) -> str:
        lines = table_lines(STAT_HEAD, [stat_cells(r) for r in self.rows])
        if not self.rows:
            lines.append("(no intercepted calls on the target device)")
        if self.rows or self.passed:
            lines.append(total_line(self.totals))
        lines += sync_lines(self.syncs)
        if self.ops:
            lines.append(f"aten calls counted (trace.counting): {self.ops['device']} on the device, "
                         f"{self.ops['cpu']} run on the CPU by dmlshim")
        lines += cache_lines(self.caches)
        if self.defects is not None:
            lines += defect_lines(self.defects)
        return "\n".join(lines)

    __repr__ = __str__


PARTS = ("own", "substitute", "overhead")
STAT_HEAD = ("op", "calls", "actions", "ms", "own", "substitute", "overhead", "host->dev", "dev->host")


def totals(rows: List[dict], passed: Optional[Dict[str, dict]] = None) -> dict:
    """``calls``, ``seconds``, ``own``, ``substitute``, ``overhead`` (seconds), ``h2d`` and
    ``d2h`` (bytes) summed over report rows (a row without the parts, from an older file,
    adds its seconds to none of them); ``passed_calls`` and ``passed_seconds``, the
    kernels that passed device calls through (``Report.passed``), whose seconds are in
    ``seconds`` and ``overhead`` too."""
    out = {"calls": 0, "seconds": 0.0, "own": 0.0, "substitute": 0.0, "overhead": 0.0, "h2d": 0, "d2h": 0}
    for r in rows:
        for key in out:
            out[key] += r.get(key, 0)
    out["passed_calls"] = sum(p["calls"] for p in (passed or {}).values())
    out["passed_seconds"] = sum(p["seconds"] for p in (passed or {}).values())
    out["seconds"] += out["passed_seconds"]
    out["overhead"] += out["passed_seconds"]
    return out


def stat_cells(row: dict) -> tuple:
    """One report row as the text cells under ``STAT_HEAD``: ``(op, calls, actions, ms, own
    ms, substitute ms, overhead ms, h2d, d2h)``."""
    return (row["op"], str(row["calls"]), " ".join(f"{k}={v}" for k, v in row["actions"].items()),
            f"{row['seconds'] * 1e3:.2f}", *(f"{row.get(p, 0.0) * 1e3:.2f}" for p in PARTS),
            human_bytes(row["h2d"]), human_bytes(row["d2h"]))


def total_line(t: dict, indent: str = "") -> str:
    """The totals (:func:`totals`) as one line: calls, ms, and each part's ms and share."""
    seconds = t["seconds"]
    parts = ", ".join(f"{p} {t[p] * 1e3:.2f} ({100 * t[p] / seconds if seconds else 0:.0f}%)" for p in PARTS)
    passed = (f"; of the overhead, {t['passed_seconds'] * 1e3:.2f} ms in {t['passed_calls']} device calls "
              "dmlshim's Python kernels passed through" if t.get("passed_calls") else "")
    return f"{indent}total: {t['calls']} calls, {seconds * 1e3:.2f} ms: {parts}{passed}"


def defect_lines(detection: dict, indent: str = "") -> List[str]:
    """The defects table of a ``Detection.to_dict()``: defect, row, status, fixes, figure."""
    fixes_on = detection["fixes_on"]
    head = (f"{indent}defects on {detection['device'] or 'no device'} (DMLSHIM_PROBE="
            f"{detection['mode']}, cache {detection['cache']}, {detection['seconds'] * 1e3:.1f} ms):")
    rows = [(d["name"], d["row"], d["status"],
             " ".join(f if fixes_on is None or f in fixes_on else f"({f})" for f in d["fixes"]),
             d["figure"][:60]) for d in detection["defects"]]
    return [head] + table_lines(("defect", "row", "status", "fixes ((off))", "figure"), rows, indent + "  ")


def sync_lines(syncs: Dict[str, Dict[str, dict]], indent: str = "") -> List[str]:
    """One line per side: the device-to-host reads the model made, and dmlshim's."""
    lines = []
    for who, label in (("model", "the model's"), ("dmlshim", "dmlshim's")):
        ops = syncs.get(who, {})
        if ops:
            total = sum(c["reads"] for c in ops.values())
            size = human_bytes(sum(c["bytes"] for c in ops.values()))
            top = ", ".join(f"{op} {c['reads']}" for op, c in sorted(ops.items(), key=lambda x: -x[1]["reads"])[:4])
            lines.append(f"{indent}device-to-host reads, {label}: {total} ({size}; {top})")
    return lines


def cache_lines(caches: Dict[str, dict], indent: str = "") -> List[str]:
    """One line per shim-owned cache (``{name: {"tensors", "bytes"}}``)."""
    return [f"{indent}cache {name}: {c['tensors']} tensors, {human_bytes(c['bytes'])}"
            for name, c in caches.items()]


def table_lines(head, rows, indent: str = "") -> List[str]:
    """``head`` and ``rows`` (sequences of cells) as left-aligned text columns."""
    widths = [max(len(str(x)) for x in col) for col in zip(head, *rows)]
    return [indent + "  ".join(str(x).ljust(w) for x, w in zip(line, widths)).rstrip()
            for line in (head, *rows)]


def human_bytes(n: int) -> str:
    """``n`` bytes as text: ``"512 B"``, ``"1.5 KiB"``, ``"3.0 MiB"``."""
    for unit in ("B", "KiB", "MiB", "GiB"):
        if n < 1024 or unit == "GiB":
            return f"{n:.0f} {unit}" if unit == "B" else f"{n:.1f} {unit}"
        n /= 1024


def report() -> Report:
    """Per-op rows (most time first): op, calls, actions, seconds and its parts own,
    substitute, overhead (seconds), h2d/d2h bytes; with their totals (:class:`Report`)."""
    with _lock:
        rows = [{"op": op, "calls": s.calls, "actions": dict(s.actions), "seconds": s.seconds,
                 "own": s.own, "substitute": s.substitute, "overhead": s.overhead,
                 "h2d": s.h2d, "d2h": s.d2h} for op, s in _stats.items()]
        syncs = {"model": {}, "dmlshim": {}}
        for (who, op), (reads, size) in _syncs.items():
            syncs[who][op] = {"reads": reads, "bytes": size}
        passed = {op: {"calls": n, "seconds": s} for op, (n, s) in _passed.items() if n}
        ops = dict(_counted)
    rows.sort(key=lambda r: r["seconds"], reverse=True)
    caches = {}
    for name, sizer in list(_caches.items()):
        tensors, size = sizer()
        caches[name] = {"tensors": tensors, "bytes": size}
    detection = last_detection()
    return Report(rows, caches, None if detection is None else detection.to_dict(), syncs, passed, ops)


# () -> the last probing.Detection or None; dmlshim.probing installs its own on import
# (it sits above this module: importing it here would close an import cycle).
last_detection: Callable[[], object] = lambda: None


def reset() -> None:
    """Forget all per-op stats and read counts."""
    with _lock:
        _stats.clear()
        _syncs.clear()
        _counted.clear()
        for counter in _passed.values():
            counter[0], counter[1] = 0, 0.0


# --------------------------------------------------------------------------- tracing

def start(trace: Optional[str]) -> None:
    """Send records to logger ``dmlshim`` (``trace="log"``) or a JSON Lines file."""
    global _sink, _sink_close, _own_handler, _atexit_registered
    stop()
    if trace is None:
        return
    if trace == "log":
        if not logger.hasHandlers():       # the user asked for output: make sure it shows
            _own_handler = _LastResort(sys.stderr)
            _own_handler.setFormatter(logging.Formatter("%(name)s: %(message)s"))
            logger.addHandler(_own_handler)
        if logger.getEffectiveLevel() > logging.INFO:
            logger.setLevel(logging.INFO)
        _sink = _log_line
    else:
        stream = open(trace, "a", encoding="utf-8")
        lock = threading.Lock()

        def write(rec: dict) -> None:
            line = json.dumps(dict(rec, ts=round(time.time(), 6)))
            with lock:
                stream.write(line + "\n")

        _sink, _sink_close = write, stream.close
    if not _atexit_registered:
        atexit.register(_summary_at_exit)
        _atexit_registered = True


class _LastResort(logging.StreamHandler):
    """dmlshim's own stderr handler, silent once the root logger has a handler of its own
    (FunASR configures one after ``activate()``): a record is then printed once, there."""

    def emit(self, record: logging.LogRecord) -> None:
        if not (logger.propagate and logging.getLogger().handlers):
            super().emit(record)


def stop() -> None:
    """Stop tracing (stats keep counting)."""
    global _sink, _sink_close, _own_handler
    close, _sink, _sink_close = _sink_close, None, None
    if close is not None:
        close()
    if _own_handler is not None:
        logger.removeHandler(_own_handler)
        _own_handler = None


def tracing() -> bool:
    return _sink is not None


def _log_line(rec: dict) -> None:
    shapes = ", ".join(f"{_dtype_short(i['dtype'])}{i['shape']}@{i['device']}" for i in rec["inputs"])
    moved_ = f" h2d={rec['h2d']}B d2h={rec['d2h']}B" if rec["h2d"] or rec["d2h"] else ""
    logger.info("%s %s [%s] %.1fus = own %.1f + substitute %.1f + overhead %.1fus%s", rec["op"], rec["action"],
                shapes, rec["us"], rec["us_own"], rec["us_substitute"], rec["us_overhead"], moved_)


_SHORT = {"float32": "f32", "float16": "f16", "float64": "f64", "bfloat16": "bf16", "bool": "b8",
          "int64": "i64", "int32": "i32", "int16": "i16", "int8": "i8", "uint8": "u8"}


def _dtype_short(name: str) -> str:
    return _SHORT.get(name, name)


def _summary_at_exit() -> None:
    if _sink is None:
        return
    snapshot = report()
    if _sink is _log_line:
        logger.info("summary\n%s", snapshot)
    else:
        _sink({"summary": snapshot.to_dict()})
        sys.stderr.write(f"dmlshim summary\n{snapshot}\n")
    stop()
