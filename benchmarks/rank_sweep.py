"""The rank sweep: which ops end the process, or are wrong, on tensors of 6 to 8 dimensions.

torch-directml 0.2.5 describes most ops' tensors with at most 5 dimensions; past that many
ops end the process ('Check failed: rank <= DML_TENSOR_DIMENSION_COUNT_MAX', SIGABRT; issue
50; docs/conformance.md).  Each case of :data:`CASES` runs at every rank of :data:`SHAPES`
(5, the control, then 6, 7, 8) on the device and on the CPU; its outcome is one of
:data:`OUTCOMES`:

``right``        the CPU's shape, dtype and values (exact; within ``rtol=1e-5, atol=1e-6``
                 for the cases in :data:`APPROX`, where a GPU rounds otherwise), NaN where it has NaN
``wrong_values`` the CPU's shape and dtype, other values (the message: how many, max |Δ|)
``wrong_shape``  another shape or dtype
``raised``       an exception (the message: its first line)
``aborted``      the process ended during the case (the message: the signal and the
                 'Check failed' line of its stderr); the emulator's ``FatalDirectMLError``
                 (its model of a process end) counts as this too
``timed_out``    still running after ``--timeout`` seconds: killed

The cases run in a child process that goes on case after case and prints one JSON line as
each starts and one with its result (the device's tensors, as lists); a case that ends the
child is ``aborted`` and the next case runs in a fresh child (the pattern of
``dmlshim.probe_child``, whose helpers this uses).  The parent computes the CPU's results
and compares.  ``--device emulated`` runs on dmlshim's emulated device (``--in-process``:
no child, for a quick test).

A case is ``CASES[name](s, d)``: ``s`` the rank's shape (:data:`SHAPES`), ``d`` the device
(``"cpu"`` for the expected result); it builds its CPU inputs with :func:`make`,
:func:`mask` and :func:`index` (deterministic: small integers as floats, so sums are exact
in any order), moves them to ``d`` and returns a tensor or a tuple of them.  Importable::

    sys.path.insert(0, "benchmarks"); from rank_sweep import CASES, SHAPES, sweep

Usage (the torch 2.4.1 + torch-directml venv, the stack built; docs/realdml.md)::

    python -m dmlshim realdml run -- env VKD3D_TILED_RESOURCES=0 \\
        python benchmarks/rank_sweep.py --raw  [--json benchmarks/results/rank_sweep-realdml.json]
    python -m dmlshim realdml run -- env VKD3D_TILED_RESOURCES=0 \\
        python benchmarks/rank_sweep.py --shim --json benchmarks/results/rank_sweep-realdml-shim-before.json
    python benchmarks/rank_sweep.py --device emulated --in-process [--cases REGEX] [--ranks 5 6]

On this project's 2-core machine (lavapipe, 2026-11-29) a real-binary run of the 340 cases takes
about 5 minutes: raw 281 s in 157 child processes, with dmlshim of commit e434f42 (before
``rank_limit``) 347 s in 144; the emulated device, in process, 2 s.
"""
from __future__ import annotations

import argparse
import datetime
import json
import math
import os
import queue
import re
import subprocess
import sys
import tempfile
import threading
import time
import warnings
from pathlib import Path
from typing import Callable, Dict, List, Optional, Sequence, Tuple

import torch
import torch.nn.functional as F

ROOT = Path(__file__).resolve().parent.parent
DEFAULT_JSON = ROOT / "benchmarks" / "results" / "rank_sweep-realdml.json"

# Each rank's shape: size-1 dimensions among sizes 2 and 3; dimension 3 (size 3) is the one
# reduced, sorted, gathered ...; dimension 0 has size 2 (so a stack of two rank-1 inputs has it).
SHAPES: Dict[int, Tuple[int, ...]] = {
    5: (2, 1, 2, 3, 2),
    6: (2, 1, 2, 3, 1, 2),
    7: (2, 1, 2, 3, 1, 2, 2),
    8: (2, 1, 2, 3, 1, 2, 1, 2),
}
OUTCOMES = ("right", "wrong_values", "wrong_shape", "raised", "aborted", "timed_out")
RTOL, ATOL = 1e-5, 1e-6
STARTUP = 600.0          # seconds a child may take until its first case (dmlshim's first probing)
TIMEOUT = 60.0           # seconds per case


# ----------------------------------------------------------------------------- inputs

def make(shape: Sequence[int], dtype: torch.dtype = torch.float32, offset: int = 0) -> torch.Tensor:
    """A deterministic CPU tensor of small integers, -3 .. 3 (``(arange + offset) % 7 - 3``),
    as ``dtype``."""
    n = math.prod(shape)
    return ((torch.arange(n) + offset) % 7 - 3).to(dtype).reshape(tuple(shape))


def mask(shape: Sequence[int], offset: int = 0) -> torch.Tensor:
    """A deterministic CPU bool tensor, True at every third element."""
    return ((torch.arange(math.prod(shape)) + offset) % 3 == 0).reshape(tuple(shape))


def index(shape: Sequence[int], size: int) -> torch.Tensor:
    """A deterministic CPU int64 tensor of indices ``0 .. size - 1`` (repeats included)."""
    return (torch.arange(math.prod(shape)) % size).reshape(tuple(shape))


def reversal(s: Sequence[int], dim: int) -> torch.Tensor:
    """An int64 tensor of shape ``s`` whose every slice along ``dim`` is ``size - 1 .. 0``
    (a permutation: scatter writes each place once)."""
    view = [1] * len(s)
    view[dim] = s[dim]
    return torch.arange(s[dim] - 1, -1, -1).reshape(view).expand(tuple(s)).contiguous()


def squeezed(s: Sequence[int]) -> Tuple[int, ...]:
    """``s`` with dimensions 0 and 3 (sizes 2 and 3) set to 1: an operand that broadcasts."""
    return tuple(1 if i in (0, 3) else n for i, n in enumerate(s))


def reversed_dims(t: torch.Tensor) -> torch.Tensor:
    """``t`` permuted, its dimensions in reverse order (a non-contiguous view)."""
    return t.permute(*reversed(range(t.dim())))


def _x(s, d, dtype=torch.float32, offset=0):
    return make(s, dtype, offset).to(d)


def _copy_into(destination: torch.Tensor, d) -> torch.Tensor:
    """``destination`` (a non-contiguous view) after ``copy_`` of a contiguous tensor of its shape."""
    return destination.copy_(_x(destination.shape, d))


def _y(s, d):
    """A second operand, 1 .. 4: never 0 (``div``)."""
    return (make(s, offset=2).abs() + 1).to(d)


# ------------------------------------------------------------------------------ cases

Case = Callable[[Tuple[int, ...], object], object]

CASES: Dict[str, Case] = {
    # reductions (dimension 3 has size 3, distinct values along it: no ties for arg*/sort)
    "sum_dim": lambda s, d: _x(s, d).sum(3),
    "sum_two_dims": lambda s, d: _x(s, d).sum((0, 3)),
    "sum_all": lambda s, d: _x(s, d).sum(),
    "sum_keepdim": lambda s, d: _x(s, d).sum(3, keepdim=True),
    "mean": lambda s, d: _x(s, d).mean(3),
    "amax": lambda s, d: _x(s, d).amax(3),
    "amin": lambda s, d: _x(s, d).amin(3),
    "argmax": lambda s, d: _x(s, d).argmax(3),
    "argmin": lambda s, d: _x(s, d).argmin(3),
    "max_dim": lambda s, d: tuple(_x(s, d).max(3)),
    "min_dim": lambda s, d: tuple(_x(s, d).min(3)),
    "prod": lambda s, d: _x(s, d).prod(3),
    "any": lambda s, d: mask(s).to(d).any(3),
    "all": lambda s, d: mask(s).to(d).all(3),
    "std": lambda s, d: _x(s, d).std(3),
    "var": lambda s, d: _x(s, d).var(3),
    "logsumexp": lambda s, d: _x(s, d).logsumexp(3),
    "norm": lambda s, d: _x(s, d).norm(dim=3),
    # scans and sorts
    "cumsum": lambda s, d: _x(s, d).cumsum(3),
    "cumprod": lambda s, d: _x(s, d).cumprod(3),
    "logcumsumexp": lambda s, d: _x(s, d).logcumsumexp(3),
    "sort": lambda s, d: tuple(_x(s, d).sort(3)),
    "argsort": lambda s, d: _x(s, d).argsort(3),
    "topk": lambda s, d: tuple(_x(s, d).topk(2, 3)),
    "kthvalue": lambda s, d: tuple(_x(s, d).kthvalue(2, 3)),
    # joining, selecting, indexing
    "cat_dim0": lambda s, d: torch.cat([_x(s, d), _x(s, d, offset=1)], 0),
    "cat_middle": lambda s, d: torch.cat([_x(s, d), _x(s, d, offset=1)], 3),
    "cat_last": lambda s, d: torch.cat([_x(s, d), _x(s, d, offset=1)], -1),
    "stack": lambda s, d: torch.stack([_x(s[1:], d), _x(s[1:], d, offset=1)]),     # rank - 1 inputs
    "where": lambda s, d: torch.where(mask(s).to(d), _x(s, d), _y(s, d)),
    "where_broadcast": lambda s, d: torch.where(mask(squeezed(s)).to(d), _x(s, d), _y(squeezed(s), d)),
    "gather": lambda s, d: _x(s, d).gather(3, index(s, s[3]).to(d)),
    "scatter": lambda s, d: torch.zeros(s).to(d).scatter(3, reversal(s, 3).to(d), _x(s, d)),
    "scatter_add": lambda s, d: _y(s, d).scatter_add(3, index(s, s[3]).to(d), _x(s, d)),
    "index_select": lambda s, d: _x(s, d).index_select(3, torch.tensor([2, 0, 2]).to(d)),
    "index_add": lambda s, d: _x(s, d).index_add(3, torch.tensor([2, 0, 2]).to(d), _y(s, d)),
    "masked_fill": lambda s, d: _x(s, d).masked_fill(mask(s).to(d), 9.0),
    "masked_select": lambda s, d: _x(s, d).masked_select(mask(s).to(d)),
    "flip_one": lambda s, d: _x(s, d).flip(3),
    "flip_several": lambda s, d: _x(s, d).flip(0, 3, len(s) - 1),     # no negative dim: its own defect
    "roll": lambda s, d: _x(s, d).roll(1, 3),
    "tril": lambda s, d: _x(s, d).tril(),
    "triu": lambda s, d: _x(s, d).triu(),
    # normalisations
    "softmax": lambda s, d: _x(s, d).softmax(3),
    "log_softmax": lambda s, d: _x(s, d).log_softmax(3),
    "layer_norm_last": lambda s, d: F.layer_norm(_x(s, d), s[-1:]),
    "layer_norm_last2": lambda s, d: F.layer_norm(_x(s, d), s[-2:]),
    "layer_norm_last_affine": lambda s, d: F.layer_norm(_x(s, d), s[-1:], _y(s[-1:], d), _x(s[-1:], d)),
    "layer_norm_last2_affine": lambda s, d: F.layer_norm(_x(s, d), s[-2:], _y(s[-2:], d), _x(s[-2:], d)),
    # unary
    "exp": lambda s, d: _x(s, d).exp(),
    "abs": lambda s, d: _x(s, d).abs(),
    "neg": lambda s, d: _x(s, d).neg(),
    "clone": lambda s, d: _x(s, d).clone(),
    # layout: copies, views, padding
    "contiguous_of_permuted": lambda s, d: reversed_dims(_x(s, d)).contiguous(),
    "copy_into_permuted": lambda s, d: _copy_into(reversed_dims(torch.zeros(s[::-1]).to(d)), d),
    "copy_into_transposed": lambda s, d: _copy_into(torch.zeros(s).to(d).transpose(0, 3), d),
    "expand_contiguous": lambda s, d: _x(squeezed(s), d).expand(s).contiguous(),
    "repeat": lambda s, d: _x(s, d).repeat((1,) * (len(s) - 1) + (2,)),
    "squeeze": lambda s, d: _x(s, d).squeeze(1),
    "unsqueeze": lambda s, d: _x(s[:1] + s[2:], d).unsqueeze(1),
    "reshape_non_contiguous": lambda s, d: _x(s, d).transpose(0, 3).reshape(s),
    "pad_constant": lambda s, d: F.pad(_x(s, d), (1, 1, 0, 1), value=5.0),
    # int64
    "add_int64": lambda s, d: _x(s, d, torch.int64) + _x(s, d, torch.int64, offset=1),
    "sum_int64": lambda s, d: _x(s, d, torch.int64).sum(3),
}

# Binary ops, each three ways: the same shapes; an operand with size-1 dimensions where the
# other has 2 or 3 (:func:`squeezed`); an operand of one dimension fewer (rank - 1 with rank).
BINARY: Dict[str, Callable] = {"add": torch.add, "sub": torch.sub, "mul": torch.mul, "div": torch.div,
                               "eq": torch.eq, "lt": torch.lt, "maximum": torch.maximum}
for _name, _op in BINARY.items():
    CASES[f"{_name}_same"] = lambda s, d, op=_op: op(_x(s, d), _y(s, d))
    CASES[f"{_name}_broadcast"] = lambda s, d, op=_op: op(_x(s, d), _y(squeezed(s), d))
    CASES[f"{_name}_lower_rank"] = lambda s, d, op=_op: op(_y(s[1:], d), _x(s, d))

# compared within RTOL/ATOL: a GPU's rounding (reduction order, transcendental functions, division)
APPROX = frozenset({"mean", "std", "var", "logsumexp", "norm", "logcumsumexp", "softmax", "log_softmax",
                    "layer_norm_last", "layer_norm_last2", "layer_norm_last_affine",
                    "layer_norm_last2_affine", "exp", "div_same", "div_broadcast",
                    "div_lower_rank"})


# ------------------------------------------------------------------------- comparison

def _tensors(result) -> Tuple[torch.Tensor, ...]:
    return tuple(result) if isinstance(result, (tuple, list)) else (result,)


def _same_values(a: torch.Tensor, b: torch.Tensor, approx: bool) -> bool:
    if a.is_floating_point():
        if approx:
            return torch.allclose(a, b, rtol=RTOL, atol=ATOL, equal_nan=True)
        nan = a.isnan()
        return torch.equal(nan, b.isnan()) and torch.equal(a[~nan], b[~nan])
    return torch.equal(a, b)


def compare(expected, got, approx: bool = False) -> Tuple[str, str]:
    """``(outcome, message)`` of a device result ``got`` (on the CPU) against the CPU's
    ``expected``: ``right``, ``wrong_shape`` or ``wrong_values``."""
    expected, got = _tensors(expected), _tensors(got)
    if len(expected) != len(got):
        return "wrong_shape", f"{len(got)} results, the CPU {len(expected)}"
    for i, (e, g) in enumerate(zip(expected, got)):
        if e.shape != g.shape or e.dtype != g.dtype:
            return "wrong_shape", (f"result {i}: {tuple(g.shape)} {str(g.dtype)[6:]}, "
                                   f"the CPU {tuple(e.shape)} {str(e.dtype)[6:]}")
    for i, (e, g) in enumerate(zip(expected, got)):
        if not _same_values(e, g, approx):
            if e.dtype == torch.bool:
                bad = int((e != g).sum())
                return "wrong_values", f"result {i}: {bad} of {e.numel()} differ"
            delta = (g.double() - e.double()).abs().nan_to_num(math.inf)
            bad = int((delta > ATOL + RTOL * e.double().abs()).sum()) if approx else int((delta != 0).sum())
            return "wrong_values", (f"result {i}: {bad} of {e.numel()} differ, max |Δ| "
                                    f"{float(delta.max()):.3g}; got {g.flatten()[:8].tolist()}, "
                                    f"the CPU {e.flatten()[:8].tolist()}")
    return "right", ""


def first_line(exc: BaseException) -> str:
    text = str(exc).strip().splitlines()
    return f"{type(exc).__name__}: {text[0][:200] if text else ''}"


def _encode(result) -> List[dict]:
    return [{"dtype": str(t.dtype)[6:], "shape": list(t.shape), "values": t.tolist()}
            for t in _tensors(result)]


def _decode(items: List[dict]):
    tensors = tuple(torch.tensor(i["values"], dtype=getattr(torch, i["dtype"])).reshape(i["shape"])
                    for i in items)
    return tensors if len(tensors) > 1 else tensors[0]


def _on_cpu(result):
    return tuple(t.cpu() for t in result) if isinstance(result, (tuple, list)) else result.cpu()


# ------------------------------------------------------------------------------ running

def keys_of(names: Sequence[str], ranks: Sequence[int]) -> List[str]:
    """``"name@rank"`` for every case and rank, rank by rank (the controls first)."""
    return [f"{n}@{r}" for r in ranks for n in names]


def run_key(key: str, device):
    """The case ``key`` (``"name@rank"``) on ``device``, its result on the CPU."""
    name, _, rank = key.partition("@")
    return _on_cpu(CASES[name](SHAPES[int(rank)], device))


def expected_of(key: str):
    """The CPU's result of ``key``, or the CPU's exception."""
    try:
        return run_key(key, "cpu")
    except Exception as exc:                     # noqa: BLE001 - recorded: the case is not comparable
        return exc


def _fatal(type_name: str) -> bool:
    return type_name == "FatalDirectMLError"     # the emulator's model of a process end


def judge(key: str, expected, got=None, raised: Optional[Tuple[str, str]] = None) -> dict:
    """The row of a case: ``{"outcome", "message"}`` from its device result or exception
    ``(type name, first line)``."""
    if isinstance(expected, BaseException):
        return {"outcome": "raised", "message": "the CPU raised " + first_line(expected), "cpu_raised": True}
    if raised is not None:
        return {"outcome": "aborted" if _fatal(raised[0]) else "raised", "message": raised[1]}
    outcome, message = compare(expected, got, key.partition("@")[0] in APPROX)
    return {"outcome": outcome, "message": message}


def select_device(spec: str, shim: bool):
    """The device of ``spec`` (``directml`` | ``emulated``), dmlshim activated first with ``shim``."""
    if spec == "emulated":
        from dmlshim import emulation
        device = emulation.install()
    elif spec == "directml":
        import torch_directml
        device = torch_directml.device()
    else:
        raise ValueError(f"--device {spec!r}: allowed are directml and emulated")
    if shim:
        import dmlshim
        dmlshim.activate()
    return device


def run_in_process(keys: Sequence[str], device) -> Dict[str, dict]:
    """Every case of ``keys`` on ``device`` in this process (no process end is survived)."""
    rows = {}
    for key in keys:
        start = time.perf_counter()
        try:
            with warnings.catch_warnings():
                warnings.simplefilter("ignore")
                got, raised = run_key(key, device), None
        except Exception as exc:                  # noqa: BLE001 - an outcome
            got, raised = None, (type(exc).__name__, first_line(exc))
        rows[key] = {**judge(key, expected_of(key), got, raised), "seconds": round(time.perf_counter() - start, 3)}
    return rows


def child_main(device_spec: str, shim: bool, keys: Sequence[str]) -> int:
    """The child: select the device, print ``{"ready"}``, then per case ``{"start": key}`` and
    ``{"key", "result"}`` (the tensors as lists) or ``{"key", "raised", "type"}``, flushed."""
    out = os.fdopen(os.dup(1), "w", encoding="utf-8")
    os.dup2(2, 1)                    # what a case or a library prints goes to stderr, not into the protocol
    warnings.simplefilter("ignore")  # torch-directml's CPU-fallback warnings
    start = time.perf_counter()
    device = select_device(device_spec, shim)

    def send(message):
        out.write(json.dumps(message) + "\n")
        out.flush()
    send({"ready": round(time.perf_counter() - start, 2)})
    for key in keys:
        sys.stderr.flush()
        send({"start": key, "stderr": _position(2)})
        try:
            send({"key": key, "result": _encode(run_key(key, device))})
        except Exception as exc:                  # noqa: BLE001 - an outcome
            send({"key": key, "raised": first_line(exc), "type": type(exc).__name__})
    return 0


def _position(fd: int) -> int:
    """Where the next write to ``fd`` goes (the parent reads the child's stderr from there), 0
    where it cannot tell."""
    try:
        return os.lseek(fd, 0, os.SEEK_CUR)
    except OSError:
        return 0


GLOG_TIME = re.compile(r"^\[F\d{4} [\d:.]+ ")


class ChildError(RuntimeError):
    """A child ended or hung before its first case."""


def _stderr_since(errors, offset: int) -> str:
    """The line of the child's stderr (from byte ``offset``) that says why it ended: the last
    'Check failed' line, else the last non-empty one.  Called once the child has ended (the
    file's offset is the child's too)."""
    errors.seek(offset)
    lines = [ln.strip() for ln in errors.read().decode("utf-8", "replace").splitlines() if ln.strip()]
    checks = [ln for ln in lines if "Check failed" in ln]
    # glog's prefix without its time: "[F dml_tensor_desc.cc:80] Check failed: ..."
    return GLOG_TIME.sub("[F ", (checks or lines or [""])[-1])[:300]


def _one_child(keys, device_spec, shim, expected, timeout, startup) -> Tuple[Dict[str, dict], int]:
    """The rows one child gives before it ends (at least one), and its start-up seconds."""
    from dmlshim.probe_child import _BOOTSTRAP, _how, _read
    paths = [p for p in os.environ.get("PYTHONPATH", "").split(os.pathsep)
             if p and os.path.abspath(p) != _BOOTSTRAP]          # `dmlshim run`'s hook would activate dmlshim
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(ROOT), *paths])}
    command = [sys.executable, os.path.abspath(__file__), "--child", "--device", device_spec,
               *(["--shim"] if shim else []), "--cases-exact", *keys]
    rows: Dict[str, dict] = {}
    running, began, ready, offset, lines = None, 0.0, None, 0, queue.Queue()
    with tempfile.TemporaryFile() as errors:
        child = subprocess.Popen(command, stdin=subprocess.DEVNULL, stdout=subprocess.PIPE, stderr=errors,
                                 env=env, text=True, encoding="utf-8", errors="replace")
        reader = threading.Thread(target=_read, args=(child.stdout, lines), daemon=True)
        reader.start()
        deadline = time.monotonic() + startup
        try:
            while True:
                try:
                    line = lines.get(timeout=max(0.0, deadline - time.monotonic()))
                except queue.Empty:
                    child.kill()
                    if running is None:
                        raise ChildError(f"no case started within {startup:g} s; stderr: "
                                         f"{_stderr_since(errors, 0)}") from None
                    rows[running] = {"outcome": "timed_out", "message": f"killed after {timeout:g} s",
                                     "seconds": round(time.perf_counter() - began, 3)}
                    running = None
                    break
                if line is None:
                    break
                try:
                    message = json.loads(line)
                except ValueError:
                    continue
                if not isinstance(message, dict):
                    continue
                if "ready" in message:
                    ready = message["ready"]
                elif message.get("start") in keys:
                    running, began, deadline = message["start"], time.perf_counter(), time.monotonic() + timeout
                    offset = int(message.get("stderr", 0))
                elif running is not None and message.get("key") == running:
                    if "raised" in message:
                        row = judge(running, expected[running], raised=(message["type"], message["raised"]))
                    else:
                        row = judge(running, expected[running], _decode(message["result"]))
                    rows[running] = {**row, "seconds": round(time.perf_counter() - began, 3)}
                    running = None
        finally:
            if child.poll() is None:
                child.kill()
            rc = child.wait()
            reader.join(5.0)
            child.stdout.close()
        if running is not None:
            why = _stderr_since(errors, offset)
            rows[running] = {"outcome": "aborted", "message": f"{_how(rc)}: {why}" if why else _how(rc),
                             "seconds": round(time.perf_counter() - began, 3)}
        elif not rows:
            raise ChildError(f"the child ended ({_how(rc)}) before its first case; stderr: "
                             f"{_stderr_since(errors, 0)}")
    return rows, ready


def run_in_children(keys: Sequence[str], device_spec: str, shim: bool, *, timeout: float = TIMEOUT,
                    startup: float = STARTUP, progress: bool = True) -> Tuple[Dict[str, dict], List[float]]:
    """Every case of ``keys`` in child processes, a fresh one after each that ends.

    Returns:
        (key -> row, the start-up seconds of each child)."""
    expected = {k: expected_of(k) for k in keys}
    rows: Dict[str, dict] = {}
    startups: List[float] = []
    while len(rows) < len(keys):
        got, ready = _one_child([k for k in keys if k not in rows], device_spec, shim, expected,
                                timeout, startup)
        startups.append(ready)
        if progress:
            for key, row in got.items():
                if row["outcome"] != "right":
                    print(f"  {key}: {row['outcome']} {row['message'][:120]}", flush=True)
            print(f"child {len(startups)}: {len(got)} cases, {len(rows) + len(got)}/{len(keys)} done",
                  flush=True)
        rows.update(got)
    return rows, startups


def sweep(names: Optional[Sequence[str]] = None, ranks: Sequence[int] = tuple(SHAPES), *,
          device: str = "emulated", shim: bool = False, in_process: bool = False,
          timeout: float = TIMEOUT, progress: bool = False) -> Dict[str, Dict[str, dict]]:
    """case name -> rank (str) -> ``{"outcome", "message", "seconds"}``."""
    keys = keys_of(list(names or CASES), ranks)
    if in_process:
        rows = run_in_process(keys, select_device(device, shim))
    else:
        rows, _ = run_in_children(keys, device, shim, timeout=timeout, progress=progress)
    return _by_case(rows)


def _by_case(rows: Dict[str, dict]) -> Dict[str, Dict[str, dict]]:
    table: Dict[str, Dict[str, dict]] = {}
    for key, row in rows.items():
        name, _, rank = key.partition("@")
        table.setdefault(name, {})[rank] = row
    return table


# ------------------------------------------------------------------------------ report

SHORT = {"right": "ok", "wrong_values": "WRONG", "wrong_shape": "SHAPE", "raised": "raise",
         "aborted": "ABORT", "timed_out": "hung"}


def table(cases: Dict[str, Dict[str, dict]], ranks: Sequence[str]) -> str:
    width = max(len(n) for n in cases)
    lines = [f"{'case':{width}}  " + "  ".join(f"{r:>5}" for r in ranks)]
    for name, by_rank in cases.items():
        lines.append(f"{name:{width}}  " + "  ".join(
            f"{SHORT[by_rank[r]['outcome']] if r in by_rank else '-':>5}" for r in ranks))
    return "\n".join(lines)


def messages(cases: Dict[str, Dict[str, dict]]) -> Dict[str, List[str]]:
    """Each message of a case that did not come out right -> the ``name@rank`` that gave it."""
    seen: Dict[str, List[str]] = {}
    for name, by_rank in cases.items():
        for rank, row in by_rank.items():
            if row["outcome"] != "right":
                seen.setdefault(f"{row['outcome']}: {row['message']}", []).append(f"{name}@{rank}")
    return seen


def _versions() -> dict:
    from importlib import metadata
    found = {"torch": torch.__version__, "python": sys.version.split()[0]}
    for dist in ("torch-directml", "dmlshim"):
        try:
            found[dist] = metadata.version(dist)
        except metadata.PackageNotFoundError:
            found[dist] = None
    return found


def _source() -> dict:
    """The checkout whose dmlshim the child imports (``ROOT``): its commit, and whether its
    ``dmlshim/`` has changes not committed (None where ``ROOT`` is no git checkout)."""
    def git(*args):
        try:
            return subprocess.run(["git", "-C", str(ROOT), *args], capture_output=True, text=True,
                                  timeout=30).stdout.strip() if (ROOT / ".git").exists() else None
        except (OSError, subprocess.SubprocessError):
            return None
    status = git("status", "--porcelain", "--", "dmlshim")
    return {"root": str(ROOT), "commit": git("rev-parse", "HEAD") or None,
            "dmlshim_uncommitted": None if status is None else bool(status)}


def main(argv: Optional[Sequence[str]] = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    mode = parser.add_mutually_exclusive_group()
    mode.add_argument("--raw", action="store_true", help="without dmlshim (the default)")
    mode.add_argument("--shim", action="store_true", help="dmlshim.activate() in the child first")
    parser.add_argument("--device", default="directml", choices=("directml", "emulated"))
    parser.add_argument("--in-process", action="store_true", help="no child process (emulated only: "
                                                                  "a process end is not survived)")
    parser.add_argument("--cases", default="", help="a regular expression the case names must match")
    parser.add_argument("--ranks", type=int, nargs="+", default=list(SHAPES), choices=list(SHAPES))
    parser.add_argument("--timeout", type=float, default=TIMEOUT, help="seconds per case (default %(default)s)")
    parser.add_argument("--json", help=f"results (default {DEFAULT_JSON.relative_to(ROOT)} for the real "
                                       "device, none for the emulated one)")
    parser.add_argument("--note", default="", help="a note for the results file")
    parser.add_argument("--child", action="store_true", help=argparse.SUPPRESS)
    parser.add_argument("--cases-exact", nargs="*", help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    if args.child:
        return child_main(args.device, args.shim, args.cases_exact or [])
    if args.in_process and args.device != "emulated":
        parser.error("--in-process runs only with --device emulated (the real binary ends the process)")
    names = [n for n in CASES if re.search(args.cases, n)]
    keys = keys_of(names, args.ranks)
    start = time.perf_counter()
    if args.in_process:
        rows, startups = run_in_process(keys, select_device(args.device, args.shim)), []
    else:
        rows, startups = run_in_children(keys, args.device, args.shim, timeout=args.timeout)
    wall = time.perf_counter() - start
    cases = _by_case(rows)
    ranks = [str(r) for r in args.ranks]
    print(table(cases, ranks))
    for message, where in messages(cases).items():
        print(f"{message}\n    {', '.join(where)}")
    counts = {r: {o: sum(1 for c in cases.values() if c.get(r, {}).get("outcome") == o) for o in OUTCOMES}
              for r in ranks}
    print(f"{len(keys)} cases in {wall:.0f} s, {len(startups)} child processes; per rank: "
          + json.dumps({r: {o: n for o, n in c.items() if n} for r, c in counts.items()}))
    out = args.json or (str(DEFAULT_JSON) if args.device == "directml" else None)
    if out:
        result = {
            "mode": "shim" if args.shim else "raw", "device": args.device,
            "environment": {k: os.environ.get(k) for k in ("VKD3D_TILED_RESOURCES",)},
            "versions": _versions(), "source": _source(), "note": args.note,
            "date": datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds"),
            "wall_s": round(wall, 1), "children": len(startups),
            "child_startup_s": [s for s in startups if s is not None],
            "timeout_s": args.timeout, "shapes": {str(r): list(SHAPES[r]) for r in args.ranks},
            "approx": sorted(APPROX & set(names)), "tolerance": {"rtol": RTOL, "atol": ATOL},
            "counts": counts, "messages": messages(cases), "cases": cases,
        }
        Path(out).parent.mkdir(parents=True, exist_ok=True)
        Path(out).write_text(json.dumps(result, indent=1, ensure_ascii=False) + "\n", encoding="utf-8")
        print(f"wrote {out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
