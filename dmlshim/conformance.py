"""``python -m dmlshim conformance``: PyTorch's OpInfo database on the emulated DirectML device.

Runs the sample inputs of every OpInfo in ``torch.testing._internal.common_methods_invocations.op_db``
on the emulated device (:mod:`dmlshim.emulation`), raw and with ``dmlshim.activate()``
(fallback ``"auto"``), in float32, float16, int64 and bool, and counts the samples whose
outputs match the CPU's (``exact`` profile of :mod:`dmlshim.parity`; a dtype DirectML
cannot hold may stay on the CPU as an island).  The ``transparency`` mode runs every
OpInfo and ModuleInfo sample on the CPU with dmlshim active against the CPU without it.
Usage::

    python -m dmlshim conformance [--ops REGEX] [--dtypes float32,float16,int64,bool]
        [--samples 4] [--mode raw|shim|both|transparency|all] [--modules REGEX]
        [--json PATH] [--verbose] [--min-rate PCT]

or from Python: ``cases = collect(...)``, ``records = run_mode(cases, "shim")``.
The protocol, the match rule and the failure classes: docs/conformance.md."""
from __future__ import annotations

import argparse
import contextlib
import itertools
import json
import math
import os
import platform
import re
import sys
import tempfile
import time
import traceback
import warnings
from collections import Counter, defaultdict
from dataclasses import dataclass, field
from typing import Any, Dict, Iterable, List, Optional, Tuple

import torch

__all__ = ["CLASSES", "Case", "Result", "collect", "run_mode", "run_sample", "classify_error",
           "compare", "summarize", "format_table", "format_details", "add_arguments", "main"]

# Classes, in the order the table prints them: the two that count as parity first.
CLASSES = ("match", "close", "nondeterministic", "abort", "float64", "error", "wrong_dtype",
           "wrong_device", "wrong_values", "stack")
PARITY = ("match", "close")
MODES = ("raw", "shim")
# On the CPU with dmlshim active against the CPU without it (docs/transparency.md).
TRANSPARENCY = "transparency"
DTYPES = {"float32": torch.float32, "float16": torch.float16, "int64": torch.int64, "bool": torch.bool}
# Ops whose output is uninitialized memory: values are not part of their contract.
UNINITIALIZED_OPS = frozenset({"empty", "empty_like", "empty_strided", "empty_permuted",
                               "new_empty", "new_empty_strided"})
# Ops the device computes with another algorithm than the CPU's kernel, by design and not
# by a defect: bit-equality is not their contract, the ``device`` profile is (``close``).
# addr: DirectML runs the CompositeExplicitAutograd math_addr (routing table), the CPU
# kernel beta*self + alpha*vec1*vec2 in one loop (fused multiply-adds where the CPU has
# FMA). linear_cross_entropy: PyTorch accumulates half inputs in float32 on the CPU only
# (torch.nn.modules.linear_cross_entropy_options._AUTO_DEFAULTS; CUDA neither).
OTHER_ALGORITHM = {
    "addr": "DirectML decomposes it (math_addr), the CPU fuses it",
    "nn.functional.linear_cross_entropy": "float32 accumulation on the CPU only",
    # with dmlshim: its fix of DirectML's bilinear upsampling (failure_modes.md #21)
    "nn.functional.interpolate": "dmlshim resamples one axis at a time, the CPU both at once",
    "nn.functional.upsample_bilinear": "dmlshim resamples one axis at a time, the CPU both at once",
}
# Ops whose indices may list equal values in any order (torch.sort/argsort: "If stable is
# False, the relative order of equivalent elements is not guaranteed"; torch.topk promises
# no order among ties): the position of ``dim`` among the sample's args. Indices that pick
# the CPU's values in another order are ``close`` (the real binary lists ties in input order
# where the CPU's unstable sort does not).
TIE_ORDER = {"sort": 0, "argsort": 0, "topk": 1}
# Dtypes no DirectML device holds (process abort: failure_modes.md #8, #9); float64
# joins them where has_float64_support() is False (#7).
NEVER_HELD = frozenset({torch.bfloat16, torch.complex32, torch.complex64, torch.complex128})
# CPU reruns that must all equal the reference before a difference counts as wrong_values.
CPU_RERUNS = 20
_MESSAGE_CHARS = 200


@dataclass
class Case:
    """One OpInfo sample input the CPU accepts, with its CPU reference output.

    Attributes:
        opinfo: the ``OpInfo``; ``op``/``variant`` its ``name``/``variant_test_name``.
        dtype: the dtype the sample was made for (``"float32"`` ...).
        index: position among the samples ``sample_inputs`` yielded (0-based).
        sample: the ``SampleInput`` (CPU tensors, never mutated: runs get copies).
        expected: the CPU output.
        deterministic: False when the op returns uninitialized memory, or CPU runs
            after ``torch.manual_seed(0)`` differ from each other (two runs at
            collection; :data:`CPU_RERUNS` more when the device's values differ):
            values are then not compared.
        pinned: per tensor of the sample (:func:`_tensors` order), whether it stays on
            the CPU in the device run (OpInfo keeps it there on every device).
        kind: ``"op"`` (an OpInfo sample) or ``"module"`` (a ModuleInfo sample:
            ``opinfo`` builds the module and runs its forward; transparency only).
    """

    opinfo: Any
    op: str
    variant: str
    dtype: str
    index: int
    sample: Any
    expected: Any
    deterministic: bool
    pinned: Tuple[bool, ...] = ()
    kind: str = "op"


@dataclass
class Result:
    """The outcome of one sample in one mode: a class of :data:`CLASSES` and a short text."""

    cls: str
    message: str = ""


@dataclass
class Collected:
    """What :func:`collect` found: the cases, and what it left out (not counted)."""

    cases: List[Case] = field(default_factory=list)
    cpu_rejects: List[dict] = field(default_factory=list)     # op, variant, dtype, index, message
    sample_errors: List[dict] = field(default_factory=list)   # op, variant, dtype, message
    seconds: float = 0.0


# ---------------------------------------------------------------- collecting samples

def op_db() -> list:
    """PyTorch's OpInfo list (imports ``torch.testing._internal``: about 9 s).

    Raises:
        ImportError: ``expecttest`` is missing (``pip install "dmlshim[conformance]"``).
    """
    from torch.testing._internal.common_methods_invocations import op_db as db
    return db


def collect(ops: Optional[str] = None, dtypes: Iterable[str] = tuple(DTYPES),
            samples: Optional[int] = 4, progress: bool = False) -> Collected:
    """The samples to run, each with its CPU reference (the CPU runs here, twice).

    Args:
        ops: a regular expression; only OpInfos whose name it finds (``re.search``) run.
        dtypes: names from :data:`DTYPES`.
        samples: how many samples per OpInfo and dtype are taken (the first ones
            yielded, before the CPU rejects any); None: all of them.
        progress: show a tqdm progress bar on stderr.

    Raises:
        ValueError: an unknown dtype name or a bad regular expression.
    """
    unknown = [d for d in dtypes if d not in DTYPES]
    if unknown:
        raise ValueError(f"unknown dtype(s) {', '.join(unknown)}; allowed: {', '.join(DTYPES)}")
    pattern = re.compile(ops) if ops else None
    selected = [op for op in op_db() if pattern is None or pattern.search(op.name)]
    out, start = Collected(), time.perf_counter()
    with _no_test_lookup():
        for opinfo in _progress(selected, progress, "CPU reference"):
            for dtype in dtypes:
                _collect_op(opinfo, dtype, samples, out)
    out.seconds = time.perf_counter() - start
    return out


class _ModuleCall:
    """A ModuleInfo sample as an op: ``call(inputs, **kwargs)`` builds the module after
    ``torch.manual_seed(0)``, converts it as PyTorch's module tests do
    (``.to(device="cpu", dtype=float32)``: this is what lazy modules failed) and returns
    ``module(*inputs, **kwargs)`` in eval mode. :meth:`on` gives the same call with the
    module moved to a device after that (as a user moves a model made on the CPU)."""

    def __init__(self, module_cls, constructor_input, device=None):
        self.module_cls, self.constructor, self.device = module_cls, constructor_input, device

    def on(self, device) -> "_ModuleCall":
        return _ModuleCall(self.module_cls, self.constructor, device)

    def __call__(self, inputs, **kwargs):
        torch.manual_seed(0)
        module = self.module_cls(*self.constructor.args, **self.constructor.kwargs)
        module = module.to(device="cpu", dtype=torch.float32).eval()
        if self.device is not None:
            module = module.to(self.device)
        return module(*inputs, **kwargs)


def collect_modules(modules: Optional[str] = None, samples: Optional[int] = 4) -> Collected:
    """ModuleInfo samples (float32, forward, eval mode) with their CPU references, for
    the transparency mode: ``module_db`` of ``torch.testing._internal.common_modules``.

    Args:
        modules: a regular expression on the ModuleInfo name (``"nn.LazyLinear"``).
        samples: the first N module inputs per ModuleInfo (None: all).
    """
    from torch.testing._internal.common_modules import module_db
    from torch.testing._internal.opinfo.core import SampleInput

    pattern = re.compile(modules) if modules else None
    out, start = Collected(), time.perf_counter()
    with _no_test_lookup():
        for info in module_db:
            if pattern is not None and not pattern.search(info.name):
                continue
            where = {"op": info.name, "variant": "module", "dtype": "float32"}
            torch.manual_seed(0)
            try:
                inputs = list(itertools.islice(info.module_inputs_func(
                    info, device="cpu", dtype=torch.float32, requires_grad=False, training=False),
                    samples))
            except Exception as exc:  # noqa: BLE001 - ModuleInfo refuses these arguments
                out.sample_errors.append({**where, "message": _text(exc)})
                continue
            for index, mi in enumerate(inputs):
                if mi.forward_input is None:
                    continue
                call = _ModuleCall(info.module_cls, mi.constructor_input)
                sample = SampleInput(tuple(mi.forward_input.args), kwargs=dict(mi.forward_input.kwargs))
                try:
                    first = _run_cpu(call, sample)
                except Exception as exc:  # noqa: BLE001 - the CPU rejects it: not counted
                    out.cpu_rejects.append({**where, "index": index, "message": _text(exc)})
                    continue
                out.cases.append(Case(call, info.name, "module", "float32", index, sample, first,
                                      _same(_run_cpu(call, sample), first), kind="module"))
    out.seconds = time.perf_counter() - start
    return out


@contextlib.contextmanager
def _no_test_lookup():
    """Skip OpInfo's search for the running unittest test (``extract_test_fn``).

    ``sample_inputs`` looks for a ``unittest.TestCase`` frame with ``inspect.stack()``
    (twice per call) to attach debugging data; there is none here, and the crawl
    costs 40-90 ms per call (about 95 s of a 2 min 15 s full run on torch 2.13).
    """
    from torch.testing._internal import common_utils
    from torch.testing._internal.opinfo import core
    modules = [m for m in (common_utils, core) if hasattr(m, "extract_test_fn")]
    saved = [m.extract_test_fn for m in modules]
    for m in modules:
        m.extract_test_fn = lambda: None
    try:
        yield
    finally:
        for m, fn in zip(modules, saved):
            m.extract_test_fn = fn


def _collect_op(opinfo, dtype: str, samples: Optional[int], out: Collected) -> None:
    where = {"op": opinfo.name, "variant": opinfo.variant_test_name, "dtype": dtype}
    torch.manual_seed(0)       # the same samples whatever --ops selects
    try:
        inputs = list(itertools.islice(
            opinfo.sample_inputs("cpu", DTYPES[dtype], requires_grad=False), samples))
    except Exception as exc:   # noqa: BLE001 - OpInfo refuses this dtype
        out.sample_errors.append({**where, "message": _text(exc)})
        return
    pinned = _cpu_pinned(opinfo, dtype, inputs)
    for index, sample in enumerate(inputs):
        try:
            first = _run_cpu(opinfo, sample)
        except Exception as exc:  # noqa: BLE001 - the CPU rejects it: not counted
            out.cpu_rejects.append({**where, "index": index, "message": _text(exc)})
            continue
        deterministic = opinfo.name not in UNINITIALIZED_OPS and _same(_run_cpu(opinfo, sample), first)
        out.cases.append(Case(opinfo, opinfo.name, opinfo.variant_test_name, dtype, index,
                              sample, first, deterministic, pinned[index]))


def _cpu_pinned(opinfo, dtype: str, inputs: list) -> List[Tuple[bool, ...]]:
    """Per sample, which of its tensors (in :func:`_tensors` order) OpInfo keeps on the
    CPU whatever device it makes samples for (``tensor_split``'s indices, ``narrow``'s
    start ...): those found on the CPU in the same samples made for the ``meta``
    device. All False when the meta samples cannot be made or do not line up."""
    nothing = [(False,) * len(_tensors(s)) for s in inputs]
    torch.manual_seed(0)
    try:
        meta = list(itertools.islice(
            opinfo.sample_inputs("meta", DTYPES[dtype], requires_grad=False), len(inputs)))
    except Exception:  # noqa: BLE001 - many samples need real values
        return nothing
    if len(meta) != len(inputs):
        return nothing
    pinned = []
    for sample, flags, m in zip(inputs, nothing, meta):
        m_tensors = _tensors(m)
        if len(m_tensors) != len(flags):
            pinned.append(flags)
        else:
            pinned.append(tuple(t.device.type == "cpu" for t in m_tensors))
    return pinned


def _tensors(sample) -> list:
    """The tensors of a ``SampleInput`` (input, args, kwargs), in :func:`_tree_map` order."""
    found = []

    def visit(x):
        if isinstance(x, torch.Tensor):
            found.append(x)
        return x
    _tree_map(visit, (sample.input, sample.args, sample.kwargs))
    return found


def _run_cpu(opinfo, sample):
    args, kwargs = _tree_map(_clone, (sample.args, sample.kwargs))
    torch.manual_seed(0)
    return opinfo(_tree_map(_clone, sample.input), *args, **kwargs)


def _same(a, b) -> bool:
    try:
        return compare(a, b, torch.device("cpu")).cls == "match"
    except Exception:  # noqa: BLE001
        return False


# ---------------------------------------------------------------- running on the device

def run_mode(cases: List[Case], mode: str, progress: bool = False, device: str = "emulated") -> List[Result]:
    """Run every case on ``device`` in ``mode`` (``"raw"`` or ``"shim"``).

    ``device`` is ``"emulated"`` (:mod:`dmlshim.emulation`, installed here) or ``"directml"``
    (torch-directml's device 0: a real GPU, or the real binary under ``realdml run``).

    ``"shim"`` activates dmlshim (fallback ``"auto"``, no trace) for the run and
    deactivates it afterwards; a shim that was active before is deactivated first.
    Before each sample, ``auto``'s remembered failures are forgotten, so each sample
    meets the shim as a fresh process would (results do not depend on run order).

    Returns:
        one :class:`Result` per case, in order.

    Raises:
        ValueError: an unknown mode or device.
        RuntimeError: the emulated device cannot be installed (see
            ``dmlshim.emulation.install``), or torch-directml has no device.
    """
    if mode not in (*MODES, TRANSPARENCY):
        raise ValueError(f"mode {mode!r}; allowed: {', '.join((*MODES, TRANSPARENCY))}")
    import dmlshim

    kind, device = device, target_device(device)
    dmlshim.deactivate()
    results = []
    run = run_sample if mode != TRANSPARENCY else run_on_cpu
    if kind == "directml" and mode != TRANSPARENCY:
        run = lambda case, device: _run_unless_fatal(case, device, mode)  # noqa: E731
    with _shim(mode != "raw"):
        for case in _progress(cases, progress, mode):
            _forget()
            results.append(run(case, device))
    return results


def target_device(kind: str) -> torch.device:
    """The device conformance runs on: ``"emulated"`` or ``"directml"`` (torch-directml's 0)."""
    if kind == "emulated":
        from dmlshim import emulation

        return emulation.install()
    if kind == "directml":
        from dmlshim import devices

        if not devices.available("directml"):
            raise RuntimeError("--device directml: torch-directml has no device here (on Linux: "
                               "run under `python -m dmlshim realdml run --`)")
        return devices.select_device("directml")
    raise ValueError(f"device {kind!r}; allowed: emulated, directml")


def run_on_cpu(case: Case, device=None) -> Result:
    """The transparency check of one case: run it on the CPU as the reference ran (with
    dmlshim active when called from ``run_mode(cases, "transparency")``) and compare
    exactly; an exception is classified, never raised."""
    cpu = torch.device("cpu")
    try:
        actual = _run_cpu(case.opinfo, case.sample)
        result = compare(actual, case.expected, cpu, values=case.deterministic)
        if result.cls == "wrong_values" and case.deterministic and not _reproducible(case):
            case.deterministic = False       # linalg.lstsq: differs run to run without dmlshim too
            result = compare(actual, case.expected, cpu, values=False)
        return result
    except Exception as exc:  # noqa: BLE001 - what dmlshim broke is the finding
        return classify_error(exc)


@contextlib.contextmanager
def _shim(active: bool):
    import dmlshim

    # DMLSHIM_BF16=cpu: the bf16 policy that keeps the CPU's dtype contract (float32, the
    # default, computes bf16 values as float32 on the device by design: docs/fun-asr-nano.md)
    saved = os.environ.get("DMLSHIM_BF16")
    if active:
        os.environ["DMLSHIM_BF16"] = "cpu"
        dmlshim.activate(fallback="auto", trace=0)
    try:
        yield
    finally:
        dmlshim.deactivate()
        if active and saved is None:
            del os.environ["DMLSHIM_BF16"]
        elif active:
            os.environ["DMLSHIM_BF16"] = saved


def _forget() -> None:
    from dmlshim.patches import auto
    auto.forget()


def _run_unless_fatal(case: Case, device: torch.device, mode: str = "raw") -> Result:
    """:func:`run_sample` on torch-directml's own device, but a sample whose inputs or CPU
    output hold a dtype DirectML aborts the process on (bf16, complex: failure_modes.md
    #8, #9) is counted ``abort`` without running it: the abort would end the whole pass
    (seen on the real binary: ``dml_util.cc:118] Invalid or unsupported data type
    ComplexFloat``, exit 134)."""
    found = _tensors(case.sample)
    _tree_map(lambda x: found.append(x) if isinstance(x, torch.Tensor) else x, case.expected)
    fatal = sorted({str(t.dtype) for t in found if t.dtype in NEVER_HELD}
                   | ({"complex (inside the op)"} if case.op.startswith(COMPLEX_INSIDE) else set()))
    if fatal:
        return Result("abort", f"not run: {', '.join(fatal)} aborts torch-directml's process")
    name = f"{mode}:{case.op}.{case.variant}:{case.dtype}#{case.index}"
    if any(_skipped(name, skip) for skip in os.environ.get("DMLSHIM_CONFORMANCE_SKIP", "").split(",")):
        return Result("abort", "not run: it ended the process in an earlier pass")
    if os.environ.get("DMLSHIM_CONFORMANCE_ECHO"):    # which sample ends a pass that aborts
        print(f"sample {name}", file=sys.stderr, flush=True)
    with _stderr_captured() as log:
        result = run_sample(case, device)
    errs = [line for line in log() if "err:" in line]
    if result.cls == "error" and errs and any(h in result.message for h in STACK_HRESULTS):
        return Result("stack", _short(f"{result.message} after vkd3d {errs[0].strip()}"))
    return result


def _skipped(name: str, skip: str) -> bool:
    """A ``DMLSHIM_CONFORMANCE_SKIP`` entry: a prefix of sample names, or one name ending in
    ``$`` (``shim:argsort.:float32#49$``; a prefix ``...#4`` would take ``#40`` too)."""
    if skip.endswith("$"):
        return name == skip[:-1]
    return bool(skip) and name.startswith(skip)


# Ops that compute through complex tensors between real inputs and outputs (fft.hfft on
# float32 aborted the real binary: "Invalid or unsupported data type ComplexFloat").
COMPLEX_INSIDE = ("fft.", "stft", "istft")
# torch-directml's text for E_INVALIDARG and E_FAIL on Linux: what it raises when vkd3d-proton
# (dxil-spirv) cannot translate a DirectML shader (docs/realdml.md); the stack's own failure
# only when vkd3d logged an ``err:`` line during the same sample (needs VKD3D_DEBUG=err).
STACK_HRESULTS = ("-2147024809", "-2147467259")


@contextlib.contextmanager
def _stderr_captured():
    """File descriptor 2 into a temporary file (vkd3d logs from C); yields a function
    that returns the lines written."""
    sys.stderr.flush()
    saved = os.dup(2)
    with tempfile.TemporaryFile(mode="w+b") as f:
        os.dup2(f.fileno(), 2)
        lines = []
        try:
            yield lambda: lines
        finally:
            sys.stderr.flush()
            os.dup2(saved, 2)
            os.close(saved)
            f.seek(0)
            lines.extend(f.read().decode("utf-8", "replace").splitlines())


def run_sample(case: Case, device: torch.device) -> Result:
    """Run one case on ``device`` and compare it with its CPU reference.

    Every exception of the device run (moving the inputs included) is classified
    (:func:`classify_error`), never raised.
    """
    try:
        inputs, args, kwargs = _to_device(case, device)
        torch.manual_seed(0)
        call = case.opinfo.on(device) if case.kind == "module" else case.opinfo
        actual = call(inputs, *args, **kwargs)
        result = compare(actual, case.expected, device, values=case.deterministic)
        if result.cls == "wrong_values" and case.deterministic and not _reproducible(case):
            case.deterministic = False
            result = compare(actual, case.expected, device, values=False)
        if result.cls == "wrong_values" and case.op in OTHER_ALGORITHM:
            result = _within_device_profile(actual, case, device, result)
        if result.cls == "wrong_values" and case.op in TIE_ORDER and _ties_reordered(actual, case):
            result = Result("close", _short(f"equal values in another order: {result.message}"))
        return result
    except Exception as exc:  # noqa: BLE001 - a DirectML-style failure is the finding
        return classify_error(exc)


def _within_device_profile(actual, case: Case, device, exact: Result) -> Result:
    """``close`` when an :data:`OTHER_ALGORITHM` op's values are within the ``device``
    profile (what a GPU is held to), else the exact comparison's ``wrong_values``."""
    from dmlshim import parity
    if compare(actual, case.expected, device, profile=parity.PROFILES["device"]).cls != "match":
        return exact
    return Result("close", _short(f"{OTHER_ALGORITHM[case.op]}: {exact.message}"))


def _ties_reordered(actual, case: Case) -> bool:
    """Whether a :data:`TIE_ORDER` op's device output differs from the CPU's only in the
    order of equal values: the values output (``sort``/``topk``) equal, and the indices,
    distinct along ``dim``, pick from the input what the CPU's indices pick. A stable
    ``sort``/``argsort`` is held to the CPU's order."""
    sample = case.sample
    if sample.kwargs.get("stable"):
        return False
    position = TIE_ORDER[case.op]
    dim = sample.kwargs.get("dim", sample.args[position] if len(sample.args) > position else -1)
    if case.op == "argsort":
        actual, expected = (None, actual), (None, case.expected)
    else:
        expected = case.expected
    if not (isinstance(actual, (tuple, list)) and len(actual) == 2
            and isinstance(actual[1], torch.Tensor) and actual[1].shape == expected[1].shape):
        return False
    if expected[0] is not None and not torch.equal(_plain_cpu(actual[0]), expected[0]):
        return False
    indices, cpu_indices = _plain_cpu(actual[1]), expected[1]
    source = sample.input
    if source.dim() == 0:
        return torch.equal(indices, cpu_indices)
    distinct = bool((indices.sort(dim).values.diff(dim=dim) > 0).all())
    return distinct and torch.equal(source.gather(dim, indices), source.gather(dim, cpu_indices))


def _reproducible(case: Case) -> bool:
    """Whether :data:`CPU_RERUNS` more CPU runs all equal the CPU reference.

    Some CPU kernels are not reproducible run to run even on one thread (``linalg.lstsq``
    on an ill-conditioned sample: its LAPACK path depends on memory alignment); two
    runs at collection can agree by chance, so a device difference is checked again.
    """
    return all(_same(_run_cpu(case.opinfo, case.sample), case.expected) for _ in range(CPU_RERUNS))


def _to_device(case: Case, device) -> tuple:
    """``(input, args, kwargs)`` of the case's sample with every tensor copied to
    ``device`` (but those ``case.pinned`` keeps on the CPU), and a ``device="cpu"``
    keyword (factory ops) pointing at ``device``."""
    pinned = iter(case.pinned)

    def move(x):
        if not isinstance(x, torch.Tensor):
            return x
        return x.clone() if next(pinned, False) else x.to(device)
    sample = case.sample
    kwargs = {k: (device if k == "device" and _is_cpu_device(v) else v)
              for k, v in sample.kwargs.items()}
    return _tree_map(move, (sample.input, sample.args, kwargs))


def _is_cpu_device(value) -> bool:
    return isinstance(value, (str, torch.device)) and torch.device(value).type == "cpu"


# ---------------------------------------------------------------- classifying

def classify_error(exc: BaseException) -> Result:
    """The class of an exception raised on the device.

    ``abort``: the emulator's ``FatalDirectMLError`` (DirectML's process abort on
    bf16/complex), also when the shim re-raised it as a ``DirectMLError``;
    ``float64``: "does not support Double"; ``error``: anything else (the message
    starts with the exception type).
    """
    from dmlshim.emulation import FatalDirectMLError

    chain = _chain(exc)
    if any(isinstance(e, FatalDirectMLError) or "dml_util.cc:118" in str(e) for e in chain):
        return Result("abort", _text(exc))
    if any("does not support Double" in str(e) for e in chain):
        return Result("float64", _text(exc))
    return Result("error", _text(exc))


def _chain(exc: BaseException) -> list:
    seen = []
    while exc is not None and exc not in seen:
        seen.append(exc)
        exc = exc.__cause__ or exc.__context__
    return seen


def compare(actual, expected, device: torch.device, values: bool = True, where: str = "out",
            profile=None) -> Result:
    """Compare a device output with the CPU reference.

    Args:
        actual: the output on the device (tensors, tuples/lists/namedtuples of them,
            dicts, Python scalars, ``None`` ...).
        expected: the CPU output.
        device: the device ``actual`` ran on; each output tensor must be there, or on
            the CPU when its dtype is one the device cannot hold (:func:`held`).
        values: compare values (False: shapes, dtypes and devices only).
        where: the path named in messages (``out[1].values``).
        profile: the :class:`dmlshim.parity.Profile` values are held to (default: the
            device's, ``parity.default_profile``: exact on the emulator's CPU numerics).

    Returns:
        ``Result("match")`` or the first difference: ``wrong_dtype``,
        ``wrong_device`` or ``wrong_values`` (values, shapes, structure).
    """
    if isinstance(expected, torch.Tensor):
        return _compare_tensor(actual, expected, device, values, where, profile)
    if isinstance(expected, (tuple, list)):
        if not isinstance(actual, (tuple, list)) or len(actual) != len(expected):
            return Result("wrong_values", f"{where}: {_kind(actual)} (CPU: {_kind(expected)})")
        names = getattr(expected, "_fields", None) or [f"[{i}]" for i in range(len(expected))]
        return _first_difference(
            compare(a, e, device, values, f"{where}.{n}" if not n.startswith("[") else where + n,
                    profile)
            for n, a, e in zip(names, actual, expected))
    if isinstance(expected, dict):
        if not isinstance(actual, dict) or actual.keys() != expected.keys():
            return Result("wrong_values", f"{where}: {_kind(actual)} (CPU: {_kind(expected)})")
        return _first_difference(compare(actual[k], expected[k], device, values, f"{where}[{k!r}]",
                                         profile) for k in expected)
    return _compare_scalar(actual, expected, values, where)


def _first_difference(results: Iterable[Result]) -> Result:
    """The first failure among the outputs' results; else ``nondeterministic`` if an
    output's values were not compared; else ``match``."""
    unchecked = None
    for result in results:
        if result.cls == "nondeterministic":
            unchecked = unchecked or result
        elif result.cls != "match":
            return result
    return unchecked or Result("match")


def _compare_tensor(actual, expected, device, values, where, profile) -> Result:
    if not isinstance(actual, torch.Tensor):
        return Result("wrong_values", f"{where}: {_kind(actual)} (CPU: a tensor)")
    if actual.dtype != expected.dtype:
        return Result("wrong_dtype", f"{where}: {_dtype(actual.dtype)} (CPU: {_dtype(expected.dtype)})")
    if not _on_allowed_device(actual, device):
        return Result("wrong_device", f"{where}: {_dtype(actual.dtype)} on {actual.device} "
                                      f"(expected {device.type})")
    if actual.shape != expected.shape:
        return Result("wrong_values", f"{where}: shape {list(actual.shape)} (CPU: {list(expected.shape)})")
    if not values:
        return Result("nondeterministic", f"{where}: values not compared")
    rtol, atol = _tolerance(expected.dtype, device, profile)
    try:
        torch.testing.assert_close(_plain_cpu(actual), expected, rtol=rtol, atol=atol,
                                   equal_nan=True, check_device=False, check_dtype=False,
                                   check_stride=False)
    except AssertionError as exc:
        return Result("wrong_values", f"{where}: " + _short(str(exc)))
    return Result("match")


def _compare_scalar(actual, expected, values, where) -> Result:
    if type(actual) is not type(expected):
        cls = "wrong_dtype" if _number(actual) and _number(expected) else "wrong_values"
        return Result(cls, f"{where}: {_kind(actual)} (CPU: {_kind(expected)})")
    if not values:
        return Result("nondeterministic", f"{where}: values not compared")
    both_nan = (isinstance(actual, float) and isinstance(expected, float)
                and math.isnan(actual) and math.isnan(expected))
    try:
        equal = bool(actual == expected)
    except Exception:  # noqa: BLE001 - objects without a usable ==
        equal = repr(actual) == repr(expected)
    if equal or both_nan:
        return Result("match")
    return Result("wrong_values", _short(f"{where}: {actual!r} (CPU: {expected!r})"))


def held(dtype: torch.dtype, device: torch.device) -> bool:
    """Whether ``device`` can hold ``dtype`` (else its values live on the CPU: an island).

    Never bfloat16 or complex; float64 only where
    ``dmlshim.devices.has_float64_support(device)``.
    """
    if device.type == "cpu":
        return True
    if dtype in NEVER_HELD:
        return False
    if dtype is torch.float64:
        from dmlshim import devices
        return devices.has_float64_support(device)
    return True


def _on_allowed_device(t: torch.Tensor, device: torch.device) -> bool:
    if t.device.type == device.type:
        return True
    # a CPU island: a dtype the device cannot hold, or a sparse layout (DirectML has no
    # sparse kernels, failure_modes.md #30)
    return t.device.type == "cpu" and (not held(t.dtype, device) or t.layout is not torch.strided)


def _tolerance(dtype, device, profile=None) -> Tuple[float, float]:
    from dmlshim import parity
    return (profile or parity.default_profile(device)).tolerance(dtype)


def _plain_cpu(t: torch.Tensor) -> torch.Tensor:
    """A plain ``torch.Tensor`` on the CPU with ``t``'s values (islands are subclasses)."""
    with torch._C.DisableTorchFunctionSubclass():
        t = t.detach().to("cpu")
        return t if type(t) is torch.Tensor else t.as_subclass(torch.Tensor)


# ---------------------------------------------------------------- summary and output

def summarize(collected: Collected, results: Dict[str, List[Result]]) -> dict:
    """Counts per mode.

    Returns:
        ``{"total", "cpu_rejects", "sample_errors", "modes": {mode: {"compared",
        "match", "close", "rate", "exact_rate", "classes", "groups"}}}``: ``total``
        OpInfo samples the CPU accepts; ``compared`` = the mode's samples (the
        transparency mode adds the ModuleInfo ones) less the ``nondeterministic`` ones
        (skipped: their values cannot be compared); ``rate`` = ``(match + close) /
        compared`` (0..1), ``exact_rate`` = ``match / compared``; ``groups`` the same per
        sample dtype (``"modules"``: ModuleInfo samples).
    """
    total = sum(c.kind == "op" for c in collected.cases)
    modes = {}
    for mode, rs in results.items():
        modes[mode] = _counts(rs)
        groups = defaultdict(list)          # per dtype; module samples apart
        for case, r in zip(collected.cases, rs):
            groups[case.dtype if case.kind == "op" else "modules"].append(r)
        modes[mode]["groups"] = {g: {k: v for k, v in _counts(rs).items() if k != "classes"}
                                 for g, rs in groups.items()}
    return {"total": total, "cpu_rejects": len(collected.cpu_rejects),
            "sample_errors": len(collected.sample_errors), "modes": modes}


def _counts(rs: List[Result]) -> dict:
    counts = Counter(r.cls for r in rs)
    compared = len(rs) - counts["nondeterministic"]
    parity = _parity(counts)
    return {"compared": compared, "match": counts["match"], "close": counts["close"],
            "rate": parity / compared if compared else 0.0,
            "exact_rate": counts["match"] / compared if compared else 0.0,
            "classes": {c: counts[c] for c in CLASSES if counts[c]}}


def format_table(summary: dict) -> str:
    """The table by class: one column per mode, counts and shares of the samples compared."""
    modes = list(summary["modes"])
    lines = [f"{'class':<18}" + "".join(f"{m:>16}" for m in modes)]
    for cls in CLASSES:
        cells = [(summary["modes"][m]["classes"].get(cls, 0), summary["modes"][m]["compared"])
                 for m in modes]
        if cls == "nondeterministic":
            continue
        if any(n for n, _ in cells) or cls == "match":
            lines.append(f"{cls:<18}" + "".join(f"{n:>8} {_pct(n, c):>7}" for n, c in cells))
    lines.append(f"{'compared':<18}" + "".join(f"{summary['modes'][m]['compared']:>16}" for m in modes))
    parity = [(_parity(summary["modes"][m]), summary["modes"][m]["compared"]) for m in modes]
    lines.append(f"{'parity':<18}" + "".join(f"{n:>8} {_pct(n, c):>7}" for n, c in parity))
    lines.append(f"{'skipped: nondet.':<18}"
                 + "".join(f"{summary['modes'][m]['classes'].get('nondeterministic', 0):>16}"
                           for m in modes))
    groups = sorted({g for m in modes for g in summary["modes"][m].get("groups", {})})
    for g in groups:
        cells = [summary["modes"][m].get("groups", {}).get(g) for m in modes]
        lines.append(f"{'parity ' + g:<18}" + "".join(
            f"{_parity(c):>8} {_pct(_parity(c), c['compared']):>7}" if c else f"{'-':>16}" for c in cells))
    lines.append(f"(of {summary['total']} samples the CPU accepts; not counted: "
                 f"{summary['cpu_rejects']} samples the CPU rejects, {summary['sample_errors']} "
                 "OpInfo/dtype pairs without samples)")
    return "\n".join(lines)


def _parity(counts) -> int:
    """Samples at parity with the CPU (:data:`PARITY`: exact matches and ``close`` ones) in
    a mode's or group's counts, or in a ``Counter`` of classes."""
    return sum(counts.get(cls, 0) for cls in PARITY)


def format_details(cases: List[Case], results: Dict[str, List[Result]]) -> str:
    """Per mode and failure class: each op (``name.variant``) with its count of samples
    and the first message."""
    lines = []
    for mode, rs in results.items():
        by_class = defaultdict(dict)
        for case, r in zip(cases, rs):
            if r.cls == "match":
                continue
            name = case.op + (f".{case.variant}" if case.variant else "")
            entry = by_class[r.cls].setdefault(name, [0, f"{case.dtype}#{case.index}: {r.message}"])
            entry[0] += 1
        for cls in CLASSES:
            if cls in by_class:
                lines.append(f"[{mode}] {cls} ({len(by_class[cls])} ops)")
                for name, (n, message) in sorted(by_class[cls].items()):
                    lines.append(f"    {name} ({n}): {message}")
    return "\n".join(lines)


def to_json(collected: Collected, results: Dict[str, List[Result]], summary: dict,
            seconds: Dict[str, float], options: dict) -> dict:
    """Everything as one JSON-ready dict (schema in docs/conformance.md)."""
    from dmlshim import emulation
    import dmlshim

    records = []
    for i, case in enumerate(collected.cases):
        rec = {"op": case.op, "variant": case.variant, "dtype": case.dtype, "index": case.index}
        if case.kind != "op":
            rec["kind"] = case.kind
        for mode, rs in results.items():
            if i >= len(rs):
                continue
            rec[mode] = rs[i].cls
            if rs[i].message:
                rec[f"{mode}_message"] = rs[i].message
        records.append(rec)
    return {"torch": torch.__version__, "dmlshim": dmlshim.__version__, "commit": _commit(),
            "python": platform.python_version(), "binding": emulation.binding(),
            "numerics": emulation.numerics(), "options": options, "seconds": seconds,
            **summary, "records": records, "cpu_rejects": collected.cpu_rejects,
            "sample_errors": collected.sample_errors}


def _commit() -> Optional[str]:
    """``git describe --always --dirty`` of the checkout dmlshim runs from, or None."""
    import os
    import subprocess
    try:
        out = subprocess.run(["git", "describe", "--always", "--dirty"], capture_output=True,
                             text=True, timeout=10, cwd=os.path.dirname(os.path.abspath(__file__)))
    except (OSError, subprocess.SubprocessError):
        return None
    return out.stdout.strip() or None


def write_json(data: dict, path: str) -> None:
    """Write ``data`` with one record per line (readable diffs, about 100 bytes each)."""
    head = {k: v for k, v in data.items() if k not in ("records", "cpu_rejects", "sample_errors")}
    text = json.dumps(head, indent=2)[:-2]
    for key in ("records", "cpu_rejects", "sample_errors"):
        rows = ",\n".join("    " + json.dumps(r, ensure_ascii=False) for r in data[key])
        text += f',\n  "{key}": [\n{rows}\n  ]'
    with open(path, "w", encoding="utf-8") as f:
        f.write(text + "\n}\n")


# ---------------------------------------------------------------- command line

def _device_words(kind: str) -> str:
    if kind == "emulated":
        return "emulated DirectML device"
    if os.environ.get("DMLSHIM_REALDML"):
        return "real torch-directml binary on the realdml stack (vkd3d-proton, lavapipe)"
    return "DirectML device (torch-directml)"


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--ops", metavar="REGEX", help="only OpInfos whose name matches (re.search)")
    parser.add_argument("--dtypes", default=",".join(DTYPES),
                        help="comma-separated sample dtypes (default: %(default)s)")
    parser.add_argument("--samples", type=_samples, default=4, metavar="N|all",
                        help="first N samples per OpInfo and dtype, or all (default: %(default)s)")
    parser.add_argument("--mode", choices=("raw", "shim", "both", TRANSPARENCY, "all"), default="all",
                        help="raw (no dmlshim), shim (dmlshim.activate()), both, transparency "
                             "(on the CPU with dmlshim against the CPU without) or all (default)")
    parser.add_argument("--device", choices=("emulated", "directml"), default="emulated",
                        help="the DirectML device: emulated (default) or directml (torch-directml's "
                             "device: a real GPU, or the real binary under `realdml run`)")
    parser.add_argument("--modules", metavar="REGEX", default="",
                        help="only ModuleInfos whose name matches (default: all, in the transparency "
                             "mode only); given, raw and shim run them too ('.' for all)")
    parser.add_argument("--json", metavar="PATH", help="write counts and per-sample records to PATH")
    parser.add_argument("--verbose", "-v", action="store_true",
                        help="list the ops of each failure class with a message")
    parser.add_argument("--min-rate", type=float, metavar="PCT",
                        help="exit 1 when the shim's (else raw's) parity rate is below PCT %%")
    parser.add_argument("--no-progress", action="store_true", help="no progress bars")


def main(args: argparse.Namespace) -> int:
    """The ``conformance`` subcommand. Exit 0, 1 (match rate below ``--min-rate``) or
    2 (bad arguments, or an internal error: the traceback is printed)."""
    dtypes = [d.strip() for d in args.dtypes.split(",") if d.strip()]
    modes = {"both": list(MODES), "all": [*MODES, TRANSPARENCY]}.get(args.mode, [args.mode])
    progress = not args.no_progress
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            collected = collect(args.ops, dtypes, args.samples, progress)
            seconds = {"cpu": round(collected.seconds, 1)}
            op_cases = list(collected.cases)
            if TRANSPARENCY in modes or args.modules:
                modules = collect_modules(args.modules or None, args.samples)
                seconds["modules cpu"] = round(modules.seconds, 1)
                collected.cases += modules.cases
                collected.cpu_rejects += modules.cpu_rejects
                collected.sample_errors += modules.sample_errors
            if args.modules:      # named: the device modes run the ModuleInfo samples too
                op_cases = collected.cases
            results = {}
            for mode in modes:
                start = time.perf_counter()
                results[mode] = run_mode(op_cases if mode in MODES else collected.cases, mode, progress,
                                         args.device)
                seconds[mode] = round(time.perf_counter() - start, 1)
    except (ValueError, re.error) as exc:
        print(f"python -m dmlshim conformance: error: {exc}", file=sys.stderr)
        return 2
    except Exception:  # noqa: BLE001
        traceback.print_exc()
        print("python -m dmlshim conformance: internal error", file=sys.stderr)
        return 2
    summary = summarize(collected, results)
    print(f"OpInfo conformance on the {_device_words(args.device)}, torch {torch.__version__}: "
          f"{summary['total']} samples the CPU accepts ({', '.join(dtypes)}; "
          f"{_samples_words(args.samples)} per OpInfo and dtype); seconds: "
          + ", ".join(f"{k} {v}" for k, v in seconds.items()))
    print(format_table(summary))
    if args.verbose:
        print(format_details(collected.cases, results))
    if args.json:
        options = {"ops": args.ops, "modules": args.modules, "dtypes": dtypes, "device": args.device,
                   "samples": "all" if args.samples is None else args.samples, "modes": modes}
        write_json(to_json(collected, results, summary, seconds, options), args.json)
    gated = "shim" if "shim" in modes else modes[0]
    rate = summary["modes"][gated]["rate"] * 100
    return 1 if args.min_rate is not None and rate < args.min_rate else 0


# ---------------------------------------------------------------- helpers

def _samples(text: str) -> Optional[int]:
    """``--samples``: a count, or ``all`` (None: every sample OpInfo yields)."""
    if text == "all":
        return None
    n = int(text)
    if n < 1:
        raise argparse.ArgumentTypeError("a count of 1 or more, or all")
    return n


def _samples_words(samples: Optional[int]) -> str:
    return "all samples" if samples is None else f"first {samples}"


def _tree_map(fn, obj):
    """``fn`` over every leaf of nested tuples, lists and dicts (containers rebuilt)."""
    if isinstance(obj, torch.Size):
        return fn(obj)
    if isinstance(obj, tuple) and hasattr(obj, "_fields"):
        return type(obj)(*(_tree_map(fn, x) for x in obj))
    if isinstance(obj, (tuple, list)):
        return type(obj)(_tree_map(fn, x) for x in obj)
    if isinstance(obj, dict):
        return {k: _tree_map(fn, v) for k, v in obj.items()}
    return fn(obj)


def _clone(x):
    return x.clone() if isinstance(x, torch.Tensor) else x


def _progress(items, enabled: bool, desc: str):
    if not enabled:
        return items
    try:
        from tqdm import tqdm
    except ImportError:
        return items
    return tqdm(items, desc=desc, file=sys.stderr, leave=False, mininterval=1.0)


def _text(exc: BaseException) -> str:
    lines = str(exc).strip().splitlines()
    return _short(f"{type(exc).__name__}: {lines[0] if lines else ''}")


def _short(text: str) -> str:
    text = " ".join(text.split())
    return text if len(text) <= _MESSAGE_CHARS else text[:_MESSAGE_CHARS - 3] + "..."


def _kind(x) -> str:
    if isinstance(x, (tuple, list)):
        return f"{type(x).__name__} of {len(x)}"
    return type(x).__name__


def _number(x) -> bool:
    return isinstance(x, (bool, int, float, complex))


def _dtype(dtype: torch.dtype) -> str:
    return str(dtype).replace("torch.", "")


def _pct(n: int, total: int) -> str:
    return f"{100 * n / total:.1f}%" if total else "-"
