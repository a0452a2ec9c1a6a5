"""``python -m dmlshim conformance`` (dmlshim/conformance.py): the OpInfo runner's protocol,
classification, JSON and exit status, on a small fixed set of ops (docs/conformance.md).

Each class is asserted both ways on a few ops: the raw failure (abort, float64,
wrong_dtype) and the shim's match.
"""
import dataclasses
import json
import os
import math
import subprocess
import sys
from collections import namedtuple

import pytest
import torch

pytest.importorskip("expecttest", reason="torch.testing's OpInfo database needs expecttest "
                                         "(pip install 'dmlshim[conformance]')")

from dmlshim import conformance, emulation  # noqa: E402
from dmlshim.emulation import FatalDirectMLError  # noqa: E402

# the tests' marker that assert the classes of the emulator's default rules
_CLASSES = pytest.mark.emulated_only(
    reason="asserts the classes the emulator's default rules give on a fixed op subset; the real "
           "binary's run is python -m dmlshim conformance --device directml")

SUBSET = r"^(add|addr|mul|cat|cumsum|fft\.fft|float_power|ldexp|softmax|empty_like|tensor_split|combinations)$"


@pytest.fixture(scope="module")
def collected():
    return conformance.collect(SUBSET)


@pytest.fixture(scope="module")
def results(collected):
    return {mode: conformance.run_mode(collected.cases, mode) for mode in conformance.MODES}


def classes(collected, results, mode, op, variant="", dtype=None):
    """The classes of ``op``'s samples in ``mode`` (a set)."""
    return {r.cls for c, r in zip(collected.cases, results[mode])
            if c.op == op and c.variant == variant and (dtype is None or c.dtype == dtype)}


# ---------------------------------------------------------------- protocol

def test_samples_are_the_first_n_per_opinfo_and_dtype(collected):
    """Indices run 0..3 per (OpInfo, dtype); a sample the CPU rejects is dropped,
    not replaced by a later one."""
    assert {c.op for c in collected.cases} >= {"add", "mul", "cat", "cumsum", "fft.fft"}
    for case in collected.cases:
        assert 0 <= case.index < 4
    keys = [(c.op, c.variant, c.dtype, c.index) for c in collected.cases]
    keys += [(r["op"], r["variant"], r["dtype"], r["index"]) for r in collected.cpu_rejects]
    assert len(keys) == len(set(keys))
    adds = [c for c in collected.cases if c.op == "add" and c.dtype == "float32"]
    assert [c.index for c in adds] == [0, 1, 2, 3]


def test_samples_are_the_same_in_every_collection(collected, assert_same):
    """Seeded: an --ops subset gets the samples a full run gets."""
    again = conformance.collect(r"^add$", ["float32"])
    first = [c for c in collected.cases if c.op == "add" and c.dtype == "float32"]
    for a, b in zip(first, again.cases):
        assert_same(a.sample.input, b.sample.input)


def test_bad_arguments_raise():
    with pytest.raises(ValueError, match="float8"):
        conformance.collect("^add$", ["float8"])
    with pytest.raises(ValueError, match="mode"):
        conformance.run_mode([], "fast")


@_CLASSES
def test_tensors_opinfo_keeps_on_the_cpu_stay_there(collected, results):
    """tensor_split's indices tensor is a CPU tensor on every device (OpInfo makes it so
    for 'meta' too); moved to the device it would fail as on CUDA."""
    pinned = [c for c in collected.cases if c.op == "tensor_split" and any(c.pinned)]
    assert pinned
    assert classes(collected, results, "raw", "tensor_split") == {"match"}


# ---------------------------------------------------------------- classification

@_CLASSES
def test_raw_classes(collected, results):
    assert classes(collected, results, "raw", "add") == {"match"}
    assert classes(collected, results, "raw", "cumsum") == {"match"}
    assert classes(collected, results, "raw", "fft.fft") == {"abort"}
    assert classes(collected, results, "raw", "float_power", dtype="float32") == {"float64"}
    assert classes(collected, results, "raw", "softmax", "with_dtype") == {"float64"}
    # torch.ldexp(bool, ints) decomposes into a float * bool mul in C++: bool result
    assert classes(collected, results, "raw", "ldexp", dtype="bool") == {"wrong_dtype"}


@_CLASSES
def test_shim_classes(collected, results):
    for op in ("add", "mul", "cat", "cumsum", "tensor_split", "combinations"):
        assert classes(collected, results, "shim", op) == {"match"}, op
    # CPU islands (complex, float64) and the dispatcher net (ldexp's C++ mul), reached
    # through the references OpInfo bound at import, before activate()
    assert classes(collected, results, "shim", "fft.fft") == {"match"}
    assert classes(collected, results, "shim", "float_power") == {"match"}
    assert classes(collected, results, "shim", "softmax", "with_dtype") == {"match"}
    assert classes(collected, results, "shim", "ldexp") == {"match"}


@_CLASSES
def test_uninitialized_values_are_skipped_not_matched(collected, results):
    summary = conformance.summarize(collected, results)
    assert classes(collected, results, "raw", "empty_like") == {"nondeterministic"}
    raw = summary["modes"]["raw"]
    assert raw["compared"] == summary["total"] - raw["classes"]["nondeterministic"]
    assert raw["rate"] == pytest.approx((raw["match"] + raw["close"]) / raw["compared"])
    assert raw["exact_rate"] == pytest.approx(raw["match"] / raw["compared"])


@_CLASSES
def test_another_algorithm_is_close_within_the_device_profile_only(collected, results, monkeypatch,
                                                                  profile):
    """addr: DirectML decomposes it (COMPOSITE_EXPLICIT), the CPU fuses it: where values
    are held exactly (the emulator's CPU numerics), values a few ULP apart are ``close``,
    counted at parity; beyond the device profile, wrong_values. Any other op with such a
    difference stays wrong_values. Under GPU-like numerics the device profile is the
    comparison itself: they ``match``."""
    for mode in conformance.MODES:
        expected = {"match", "close"} if profile == "exact" else {"match"}
        assert classes(collected, results, mode, "addr", dtype="float32") == expected
    cases = [c for c in collected.cases if c.op == "addr"]
    with emulation.configured(numerics="cpu"):
        pairs = list(zip(cases, conformance.run_mode(cases, "shim")))
        case, close = next((c, r) for c, r in pairs if r.cls == "close")
        assert "math_addr" in close.message and "out: Tensor-likes are not equal" in close.message
        far = dataclasses.replace(case, expected=case.expected + 1)
        monkeypatch.setattr(conformance, "_reproducible", lambda case: True)   # a made-up reference
        assert conformance.run_mode([far], "shim")[0].cls == "wrong_values"
        renamed = dataclasses.replace(case, op="addr_elsewhere")
        assert conformance.run_mode([renamed], "shim")[0].cls == "wrong_values"
    addr = conformance.Collected([c for c, _ in pairs])
    summary = conformance.summarize(addr, {"shim": [r for _, r in pairs]})["modes"]["shim"]
    assert summary["rate"] == 1.0 and summary["exact_rate"] < 1.0


@_CLASSES
def test_float_times_bool_mul_is_wrong_dtype_raw_and_matches_with_the_shim():
    """DirectML's float * bool returns bool (failure_modes.md #17): a hand-made sample
    of the mul OpInfo."""
    from torch.testing._internal.opinfo.core import SampleInput

    mul = next(op for op in conformance.op_db() if op.name == "mul")
    sample = SampleInput(torch.tensor([1.5, -2.0, 3.0]), args=(torch.tensor([True, False, True]),))
    case = conformance.Case(mul, "mul", "", "float32", 0, sample, mul(sample.input, *sample.args),
                            True, (False, False))
    raw = conformance.run_mode([case], "raw")[0]
    assert (raw.cls, raw.message) == ("wrong_dtype", "out: bool (CPU: float32)")
    assert conformance.run_mode([case], "shim")[0].cls == "match"


def test_classify_error():
    from dmlshim import DirectMLError

    abort = FatalDirectMLError("[F dml_util.cc:118] Invalid or unsupported data type ComplexFloat.")
    assert conformance.classify_error(abort).cls == "abort"
    try:
        raise DirectMLError("readable") from abort
    except DirectMLError as exc:
        assert conformance.classify_error(exc).cls == "abort"
    result = conformance.classify_error(
        RuntimeError("The GPU device does not support Double (Float64) operations!"))
    assert result.cls == "float64"
    result = conformance.classify_error(ValueError("bad\nsecond line"))
    assert (result.cls, result.message) == ("error", "ValueError: bad")


def test_compare(dml_device):
    dev, cpu = dml_device, torch.device("cpu")
    x = torch.tensor([1.0, float("nan")])
    assert conformance.compare(x.to(dev), x, dev).cls == "match"
    assert conformance.compare(x, x, dev).cls == "wrong_device"
    assert conformance.compare(x.to(dev) + 1, x, dev).cls == "wrong_values"
    assert conformance.compare(x.to(dev).bool(), x, dev).cls == "wrong_dtype"
    assert conformance.compare(x[:1].to(dev), x, dev).cls == "wrong_values"
    # a CPU island: allowed where the device cannot hold the dtype
    z = torch.tensor([1 + 2j])
    assert conformance.compare(z, z, dev).cls == "match"
    assert conformance.compare(x.bfloat16(), x.bfloat16(), dev).cls == "match"
    d = x.double()
    assert conformance.compare(d, d, dev).cls == ("wrong_device" if conformance.held(
        torch.float64, dev) else "match")
    # structures: tuples, namedtuples, scalars
    Pair = namedtuple("Pair", "values indices")
    out = Pair(x.to(dev), torch.tensor([0]).to(dev))
    assert conformance.compare(out, Pair(x, torch.tensor([0])), dev).cls == "match"
    bad = conformance.compare(Pair(x.to(dev), torch.tensor([1]).to(dev)), Pair(x, torch.tensor([0])), dev)
    assert bad.cls == "wrong_values" and bad.message.startswith("out.indices")
    assert conformance.compare((x.to(dev),), (x, x), dev).cls == "wrong_values"
    assert conformance.compare(math.nan, math.nan, cpu).cls == "match"
    assert conformance.compare(2, 2.0, cpu).cls == "wrong_dtype"
    assert conformance.compare(None, None, cpu).cls == "match"
    assert conformance.compare(x.to(dev), x, dev, values=False).cls == "nondeterministic"


# ---------------------------------------------------------------- JSON and command line

@_CLASSES
def test_json_and_exit_status(tmp_path, capsys):
    from dmlshim.__main__ import main

    path = tmp_path / "c.json"
    assert main(["conformance", "--ops", r"^(add|fft\.fft)$", "--dtypes", "float32", "--mode", "both",
                 "--no-progress", "--json", str(path), "--verbose"]) == 0
    printed = capsys.readouterr().out
    assert "match" in printed and "[raw] abort" in printed and "fft.fft" in printed
    data = json.loads(path.read_text())
    assert data["torch"] == torch.__version__
    assert data["options"] == {"ops": r"^(add|fft\.fft)$", "modules": "", "dtypes": ["float32"], "device": "emulated",
                               "samples": 4, "modes": ["raw", "shim"]}
    assert data["total"] == 8 and set(data["seconds"]) == {"cpu", "raw", "shim"}
    for mode in ("raw", "shim"):
        counts = data["modes"][mode]
        assert set(counts) == {"compared", "match", "close", "rate", "exact_rate", "classes",
                               "groups"}
        assert set(counts["groups"]) == {"float32"}
        assert sum(counts["classes"].values()) == data["total"]
    fft = [r for r in data["records"] if r["op"] == "fft.fft"]
    assert len(fft) == 4
    assert data["commit"] is None or isinstance(data["commit"], str)
    # a message only where the sample does not match
    assert {k for r in fft for k in r} == {"op", "variant", "dtype", "index", "raw", "raw_message",
                                           "shim"}
    assert fft[0]["raw"] == "abort" and "ComplexFloat" in fft[0]["raw_message"]
    assert fft[0]["shim"] == "match"
    assert main(["conformance", "--ops", r"^fft\.fft$", "--dtypes", "float32", "--mode", "raw",
                 "--no-progress", "--min-rate", "50"]) == 1
    assert main(["conformance", "--ops", r"^add$", "--dtypes", "float32", "--mode", "raw",
                 "--no-progress", "--min-rate", "100"]) == 0
    assert main(["conformance", "--ops", "(", "--no-progress"]) == 2


@_CLASSES
def test_command_line_entry_point():
    """``python -m dmlshim conformance`` in a fresh process: exit 1 below --min-rate (raw
    fft aborts), 0 at or above it (the shim runs fft as a CPU island)."""
    command = [sys.executable, "-m", "dmlshim", "conformance", "--ops", r"^fft\.fft$",
               "--dtypes", "float32", "--samples", "1", "--min-rate", "99.5", "--no-progress"]
    proc = subprocess.run(command + ["--mode", "raw"], capture_output=True, text=True, timeout=300)
    assert proc.returncode == 1, proc.stderr
    assert "abort" in proc.stdout
    proc = subprocess.run(command + ["--mode", "both"], capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, proc.stdout + proc.stderr


# ---------------------------------------------------------------- the real binary's guards

def _case(op_name, sample, variant=""):
    opinfo = next(op for op in conformance.op_db() if op.name == op_name and op.variant_test_name == variant)
    return conformance.Case(opinfo, op_name, variant, "float32", 0, sample,
                            opinfo(sample.input, *sample.args, **sample.kwargs), True,
                            tuple(False for _ in conformance._tensors(sample)))


def test_real_binary_samples_that_abort_the_process_are_not_run(dml_device, monkeypatch):
    """On torch-directml's device, a complex output (fft.fft) or an op computing through
    complex (fft.hfft on float32 ended the real binary's process) counts ``abort`` unrun;
    a sample named in DMLSHIM_CONFORMANCE_SKIP too; any other runs as run_sample does."""
    from torch.testing._internal.opinfo.core import SampleInput

    fft = _case("fft.fft", SampleInput(torch.randn(8)))
    assert torch.is_complex(fft.expected)
    result = conformance._run_unless_fatal(fft, dml_device)
    assert result.cls == "abort" and "not run" in result.message and "torch.complex64" in result.message
    hfft = _case("fft.hfft", SampleInput(torch.randn(8)))
    assert conformance._run_unless_fatal(hfft, dml_device).message.startswith("not run: complex (inside")
    add = _case("add", SampleInput(torch.randn(3), args=(torch.randn(3),)))
    assert conformance._run_unless_fatal(add, dml_device).cls == "match"
    monkeypatch.setenv("DMLSHIM_CONFORMANCE_SKIP", "shim:add.:,raw:mul.:")
    assert conformance._run_unless_fatal(add, dml_device, "raw").cls == "match"
    assert conformance._run_unless_fatal(add, dml_device, "shim").cls == "abort"


def test_stack_failures_are_counted_apart(dml_device, monkeypatch):
    """An E_INVALIDARG/E_FAIL error is the stack's own (class ``stack``) only when vkd3d
    logged an ``err:`` line on file descriptor 2 during the same sample."""
    from torch.testing._internal.opinfo.core import SampleInput

    case = _case("add", SampleInput(torch.randn(3), args=(torch.randn(3),)))

    def failing(logged):
        def run(case, device):
            if logged:
                os.write(2, b"err: dxil-spirv: unsupported opcode\n")
            return conformance.Result("error", "RuntimeError: Unknown error -2147467259")
        return run
    monkeypatch.setattr(conformance, "run_sample", failing(True))
    result = conformance._run_unless_fatal(case, dml_device)
    assert result.cls == "stack" and "err: dxil-spirv" in result.message
    monkeypatch.setattr(conformance, "run_sample", failing(False))
    assert conformance._run_unless_fatal(case, dml_device).cls == "error"


def test_ties_in_another_order_are_close_and_only_ties(dml_device, monkeypatch):
    """sort/argsort (not stable) and topk promise no order among equal values: the real
    binary lists them in input order where the CPU's sort need not. Indices that pick the
    CPU's values are ``close``; a stable sort, indices that pick other values, or repeated
    indices stay ``wrong_values``."""
    from torch.testing._internal.opinfo.core import SampleInput

    x = torch.tensor([2.0, 1.0, 2.0, 1.0, 3.0])
    ascending = torch.tensor([1.0, 1.0, 2.0, 2.0, 3.0])
    monkeypatch.setattr(conformance, "_reproducible", lambda case: True)

    def verdict(op, cpu, device, args=(), kwargs=None):
        case = dataclasses.replace(_case(op, SampleInput(x, args=args, kwargs=kwargs or {})),
                                   expected=cpu)
        on_device = tuple(t.to(dml_device) for t in device) if isinstance(device, tuple) \
            else device.to(dml_device)
        monkeypatch.setattr(case, "opinfo", lambda *a, **k: on_device)
        return conformance.run_sample(case, dml_device).cls

    cpu, in_input_order = torch.tensor([3, 1, 2, 0, 4]), torch.tensor([1, 3, 0, 2, 4])
    assert verdict("sort", (ascending, cpu), (ascending, in_input_order)) == "close"
    assert verdict("argsort", cpu, in_input_order) == "close"
    assert verdict("sort", (ascending, cpu), (ascending, in_input_order),
                   kwargs={"stable": True}) == "wrong_values"
    assert verdict("argsort", cpu, torch.tensor([1, 1, 0, 2, 4])) == "wrong_values"   # repeated
    assert verdict("argsort", cpu, torch.tensor([0, 3, 1, 2, 4])) == "wrong_values"   # other values
    top = torch.tensor([3.0, 2.0])
    assert verdict("topk", (top, torch.tensor([4, 0])), (top, torch.tensor([4, 2])), args=(2,)) == "close"
    assert verdict("topk", (top, torch.tensor([4, 0])), (top, torch.tensor([4, 1])), args=(2,)) == "wrong_values"


# ---------------------------------------------------------------- every sample, modules on the device

def test_samples_all_and_exact_skips():
    """``--samples all`` takes every sample; a skip entry ending in ``$`` names one sample
    (``#4$`` is not ``#40``), any other is a prefix."""
    assert conformance._samples("all") is None and conformance._samples("3") == 3
    assert len(conformance.collect(r"^add$", ["float32"], samples=None).cases) > 4
    assert conformance._skipped("shim:sort.:float32#4", "shim:sort.:float32#4$")
    assert not conformance._skipped("shim:sort.:float32#40", "shim:sort.:float32#4$")
    assert conformance._skipped("shim:sort.:float32#40", "shim:sort.:")
    assert not conformance._skipped("shim:sort.:float32#40", "")


def test_module_samples_run_on_the_device(dml_device, device_kind):
    """ModuleInfo samples in the device modes: the module made on the CPU, moved to the
    device (``_ModuleCall.on``), its forward compared with the CPU's (on the test's device: a
    process with torch_directml cannot install the emulated one)."""
    modules = conformance.collect_modules(r"^nn\.Linear$", samples=2)
    assert modules.cases and all(c.kind == "module" for c in modules.cases)
    results = conformance.run_mode(modules.cases, "shim", device=device_kind)
    assert {r.cls for r in results} == {"match"}
