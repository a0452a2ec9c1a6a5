"""Shared fixtures: every test gets its DirectML device from ``dml_device``.

``DMLSHIM_TEST_DEVICE=directml`` runs the suite on a real torch-directml
device when one is present; otherwise the emulated device is installed
(``dmlshim.emulation``). Tests that rely on emulator-injected behaviour
(custom rules, ``configure``) carry ``@pytest.mark.emulated_only`` and are
skipped on a real device. Results are compared with the CPU's through
``assert_parity`` (a value the device computed: the parity profile the numerics call
for), ``assert_same`` (a value no device computes: bit for bit) and ``assert_differs``
(a defect's signature); see the end of this file. Other helpers add fixtures here by
appending only.
"""
import os

import numpy as np
import pytest
import torch


def _real_directml_device():
    if os.environ.get("DMLSHIM_TEST_DEVICE", "").lower() != "directml":
        return None
    try:
        import torch_directml
    except ImportError:
        return None
    return torch_directml.device() if torch_directml.device_count() else None


_REAL = _real_directml_device()

# DMLSHIM_TEST_NUMERICS=gpu: the emulated device rounds like a GPU (split-K matmul and
# convolution, ...: dmlshim/emulation/gpu_numerics.py), so device results are compared
# with the CPU's through the "device" tolerance profile instead of exactly.
if os.environ.get("DMLSHIM_TEST_NUMERICS"):
    os.environ["DMLSHIM_EMULATION_NUMERICS"] = os.environ["DMLSHIM_TEST_NUMERICS"]


def pytest_configure(config):
    config.addinivalue_line(
        "markers", "emulated_only(reason): needs the emulated DirectML device (skipped on a real "
                   "one); reason names the emulator internal the test drives")


def _emulated_only_reason(item):
    """The reason of ``item``'s ``emulated_only`` marker, ``""`` if it gives none, ``None``
    if the item has no such marker."""
    marker = item.get_closest_marker("emulated_only")
    if marker is None:
        return None
    return marker.kwargs.get("reason") or (marker.args[0] if marker.args else "")


def pytest_collection_modifyitems(config, items):
    """A marker must say why: an emulated_only test is one the real device cannot run, and
    the reason is what a reader of a real run's skips needs (collection fails without it).
    On a real device every marked test is skipped with its reason."""
    vague = [item.nodeid for item in items if _emulated_only_reason(item) == ""]
    if vague:
        raise pytest.UsageError(
            "@pytest.mark.emulated_only(reason=...) needs a reason naming the emulator internal "
            "the test drives (injected Rules, configure(), records, FatalDirectMLError, ...):\n  "
            + "\n  ".join(vague))
    if _REAL is None:
        return
    for item in items:
        reason = _emulated_only_reason(item)
        if reason is not None:
            item.add_marker(pytest.mark.skip(reason=f"emulated_only: {reason}"))


@pytest.fixture(scope="session")
def dml_device() -> torch.device:
    """The DirectML device: real torch-directml if requested and present, else emulated."""
    if _REAL is not None:
        return _REAL
    from dmlshim import emulation

    return emulation.install()


@pytest.fixture(scope="session")
def device_kind(dml_device) -> str:
    """The test device as the ``--device`` choice of dmlshim's command lines and the
    examples: ``"directml"`` on a real device, ``"emulated"`` otherwise (a process with
    torch_directml loaded cannot install the emulated device)."""
    return "emulated" if _REAL is None else "directml"


@pytest.fixture(scope="session")
def profile(dml_device):
    """The parity profile for device results against the CPU: ``"exact"`` on the
    emulated device with CPU numerics (both sides run the CPU's kernels), ``"device"``
    on a real GPU or under DMLSHIM_TEST_NUMERICS=gpu (dmlshim.parity). For images,
    transcripts and messages; tensors go through ``assert_parity``."""
    from dmlshim import parity

    return parity.default_profile(dml_device).name


@pytest.fixture
def shim_off():
    """No shim; afterwards none, and the emulator's default rules (a test may set others)."""
    import dmlshim
    from dmlshim import emulation

    dmlshim.deactivate()
    yield
    dmlshim.deactivate()
    if emulation.is_installed():
        emulation.configure()


@pytest.fixture
def shim():
    """dmlshim active with only the known patches (no catch-all), fresh stats;
    deactivated afterwards. Test files that need other settings override it."""
    import dmlshim

    dmlshim.deactivate()
    dmlshim.activate(fallback="known", trace=0)
    dmlshim.trace.reset()
    yield
    dmlshim.deactivate()


@pytest.fixture
def default_shim():
    """dmlshim active as users get it: ``activate()`` with no arguments (the DMLSHIM_*
    environment, else fallback "auto"), fresh stats; deactivated afterwards."""
    import dmlshim

    dmlshim.deactivate()
    dmlshim.activate()
    dmlshim.trace.reset()
    yield
    dmlshim.deactivate()


# --- FunASR (owner: FUNASR helper) -------------------------------------------------
@pytest.fixture(scope="session")
def funasr_model_dir(tmp_path_factory):
    """``kind -> pathlib.Path``: a tiny random-weight FunASR model directory
    (config.yaml, model.pt, tokens.json, am.mvn) built once per session with funasr's
    own classes by examples/funasr_models.py. Kinds: paraformer, bicif, seaco, vad, punc."""
    import funasr_models  # examples/ is on sys.path: see the end of this file

    cache = tmp_path_factory.mktemp("funasr_models")
    return lambda kind: funasr_models.build(kind, cache_dir=cache)


# GFPGAN tests: the torchvision wheel the registry serves for this torch is a CUDA
# build whose compiled ops do not load on a CPU-only machine; define the one op the
# GFPGAN pipeline needs (torchvision::nms) before anything imports torchvision.
# Does nothing where torchvision's own library loads. See examples/torchvision_ops.py.
import sys as _sys  # noqa: E402
from pathlib import Path as _Path  # noqa: E402

_sys.path.insert(0, str(_Path(__file__).resolve().parents[1] / "examples"))
import torchvision_ops  # noqa: E402

torchvision_ops.apply()


@pytest.fixture(scope="session", autouse=True)
def _directml_present(dml_device):
    """A DirectML device exists for the whole session, as on a user's machine:
    ``dmlshim.activate()`` probes it (dmlshim.probing) and, with no device present,
    would install no fix.  Tests of the no-device case use ``target="cuda"``."""
    return dml_device


@pytest.fixture(autouse=True)
def _keep_torch_threads():
    """FunASR's AutoModel calls torch.set_num_threads(ncpu) (the tests pass ncpu=1: on a busy
    2-core machine 2 threads wait on each other in every LSTM step); give later tests their
    setting back. It is per OS thread: with the main thread at 1 and the autograd engine's
    device thread at 2, a CPU and a device backward sum in different orders (ULPs apart)."""
    yield
    torch.set_num_threads(_TORCH_THREADS)


_TORCH_THREADS = torch.get_num_threads()     # the session's setting, before any AutoModel


# --- Comparing results with the CPU's (issue 26) ---------------------------------------
# A result the device computed is held to the CPU's through dmlshim.parity, with the
# profile the numerics call for: ``assert_parity``. Exact comparisons have their own
# name, ``assert_same``, for what no device computes. tests/test_comparisons.py fails on
# an exact comparison written any other way.

def _plain(x):
    """Tuples (named ones such as ``PackedSequence``, which torch 2.4.1's pytree keeps
    whole), lists and dicts as plain containers, so every tensor is a leaf."""
    if isinstance(x, (tuple, list)):
        return [_plain(v) for v in x]
    return {k: _plain(v) for k, v in x.items()} if isinstance(x, dict) else x


def _leaf_pairs(actual, expected, msg):
    """``[(actual leaf, expected leaf, message)]`` of two results (tensors, or tuples,
    lists, dicts and named tuples of them); their leaf counts must agree."""
    from torch.utils._pytree import tree_flatten

    (got, got_spec), (want, want_spec) = tree_flatten(_plain(actual)), tree_flatten(_plain(expected))
    if len(got) != len(want):
        raise AssertionError(f"{msg}the results differ in structure: {got_spec} vs {want_spec}")
    return [(a, e, f"{msg}[{i}] " if len(want) > 1 else msg) for i, (a, e) in enumerate(zip(got, want))]


def _assert_within(actual, expected, prof, msg=""):
    """Every tensor (or numpy array) leaf within ``prof``; a Python float leaf as a
    float64 tensor; any other leaf (int, bool, str, None) equal."""
    from dmlshim import parity

    for a, e, where in _leaf_pairs(actual, expected, msg):
        a, e = (torch.as_tensor(x) if isinstance(x, np.ndarray) else x for x in (a, e))
        if isinstance(e, float) and isinstance(a, float):
            a, e = torch.tensor(a, dtype=torch.float64), torch.tensor(e, dtype=torch.float64)
        if isinstance(e, torch.Tensor) != isinstance(a, torch.Tensor):
            raise AssertionError(f"{where}{type(a).__name__} against {type(e).__name__}")
        if isinstance(e, torch.Tensor):
            parity.assert_close(a, e, prof, where)
        elif a != e:
            raise AssertionError(f"{where}{a!r} != {e!r}")


@pytest.fixture(scope="session")
def assert_parity(dml_device):
    """``assert_parity(device_result, cpu_result, msg="", profile=None)``: a result the
    device computed (a tensor, or a tuple/list/dict of them; moved to the CPU or not)
    equals the CPU's within the parity profile the numerics call for, taken when called
    (:func:`dmlshim.parity.default_profile`): ``exact`` on the emulator's CPU numerics,
    ``device`` on a real DirectML device or under GPU-like numerics. Integer and bool
    tensors compare exactly in every profile.

    ``profile="device"`` loosens a comparison on the CPU numerics too (a device path that
    sums in another order than the CPU's kernel). Raises ``ValueError`` for
    ``profile="exact"`` where the numerics are not the CPU's: no GPU rounds like the CPU,
    and an exact comparison of a value a device computed is a test that fails there.
    A value no device computes (data moved or copied, CPU against CPU) goes through
    ``assert_same``."""
    from dmlshim import parity

    def check(device_result, cpu_result, msg="", profile=None):
        allowed = parity.default_profile(dml_device)
        prof = allowed if profile is None else parity.profile(profile)
        if prof.name == "exact" and allowed.name != "exact":
            raise ValueError(
                f"assert_parity(profile='exact') on {dml_device} with {_numerics_words()}: "
                f"a GPU does not round like the CPU, so a device result is held to the "
                f"{allowed.name!r} profile (leave profile=None); a value no device computes "
                f"goes through assert_same")
        _assert_within(device_result, cpu_result, prof, msg)

    return check


def _numerics_words():
    emulation = _sys.modules.get("dmlshim.emulation")
    if _REAL is None and emulation is not None and emulation.is_installed():
        return f"the emulator's {emulation.numerics()!r} numerics"
    return "a real DirectML device"


@pytest.fixture(scope="session")
def assert_same():
    """``assert_same(actual, expected, msg="")``: bit-identical values, dtypes and shapes,
    on every device and in every numerics mode, for values no device computes: CPU
    against CPU (the same call with and without dmlshim), data moved, copied, viewed,
    gathered or padded on the device, random numbers from the CPU generator, and results
    dmlshim computed on the CPU and moved back. A value a device computed goes through
    ``assert_parity``."""
    from dmlshim import parity

    return lambda actual, expected, msg="": _assert_within(actual, expected,
                                                           parity.PROFILES["exact"], msg)


@pytest.fixture
def host_reads():
    """``host_reads()``: ``{op: {"reads": n, "bytes": b}}`` of the device-to-host reads dmlshim's
    own work made since the fixture was set up (or the last ``dmlshim.trace.reset()``), by the
    op whose handling made them: a call run on the CPU, an integer range read, RNN weights
    taken to the CPU, ... (``dmlshim.report().syncs["dmlshim"]``).  ``{}``: dmlshim kept
    everything on the device.  The test's own reads (``.cpu()`` to compare) are the model's,
    not counted."""
    import dmlshim

    dmlshim.trace.reset()
    return lambda: dmlshim.report().syncs["dmlshim"]


@pytest.fixture
def range_reads():
    """``range_reads()``: ``{op: count}`` of the device-to-host reads dmlshim made to learn an
    integer operand's range since the fixture was set up (``dmlshim.report()``'s ``range
    read`` actions; patches/int_range.py)."""
    import dmlshim

    def count():
        return {r["op"]: r["actions"]["range read"] for r in dmlshim.report().rows
                if r["actions"].get("range read")}

    dmlshim.trace.reset()
    return count


@pytest.fixture(scope="session")
def assert_differs():
    """``assert_differs(device_result, cpu_result, msg="")``: a defect's signature: the
    result differs from the CPU's beyond the loosest profile (``device``), or in dtype,
    shape or structure, so no device's rounding explains it."""
    from dmlshim import parity

    def check(device_result, cpu_result, msg=""):
        try:
            _assert_within(device_result, cpu_result, parity.PROFILES["device"])
        except AssertionError:
            return
        raise AssertionError(f"{msg}the result is within the 'device' profile of the "
                             f"CPU's: the defect did not show")

    return check


@pytest.fixture(scope="session", autouse=True)
def _device_autograd_thread(dml_device):
    """The autograd engine's device thread takes torch's thread count once, at its first
    parallel call, and keeps it (OpenMP's setting is per OS thread): have it take the
    session's count now, not inside a test that lowered it (FunASR's AutoModel sets 1).
    Measured: with test_funasr.py run first, test_patch_conv's conv2d weight gradient on
    the device (1 thread) came out 3.1e-5 away from the CPU's (2 threads)."""
    def take_the_count(grad):           # a hook on a device leaf runs on the device thread
        torch.get_num_threads()

    x = torch.ones(1).to(dml_device).requires_grad_()
    x.register_hook(take_the_count)
    x.sum().backward()


# --- Tests write only under tmp_path (issue 26) -------------------------------------------
# The run gets a private temp directory: TMPDIR/TEMP/TMP (subprocesses, the examples,
# funasr-server) and tempfile's default (this process) point at it from the session's
# start, so whatever a test or a program it starts writes to "the temp directory" lands
# there, and no other process on the machine writes into it.  pytest's own tmp_path base
# stays in the system temp directory (PYTEST_DEBUG_TEMPROOT), where its retention policy
# works as before.  Hypothesis, which writes ./.hypothesis (its example database and a
# constants cache) while collecting, keeps them in pytest's cache folder instead.  At the
# end the run fails if the private directory holds anything but what a library makes
# there on its own (`_ALLOWED_IN_TEMP`, `_held_by_libraries`), naming what it found; the
# directory is removed either way, so a run leaves nothing in the temp directory.
import re as _re  # noqa: E402
import shutil as _shutil  # noqa: E402
import tempfile as _tempfile  # noqa: E402

_TEMP_VARIABLES = ("TMPDIR", "TEMP", "TMP")
# torch's inductor cache folder, made empty when anything imports torch._dynamo (torch.testing's
# OpInfo database does); Hypothesis's folder when pytest runs without its cache (-p no:cacheprovider)
_ALLOWED_IN_TEMP = _re.compile(r"torchinductor_.*|hypothesis")
_run_temp = {}


def _held_by_libraries() -> set:
    """Temp folders a library holds for the whole process and removes at exit: torch
    2.4.1's torch.distributed.nn.jit.instantiator makes one at import (transformers'
    generate imports it)."""
    held = getattr(_sys.modules.get("torch.distributed.nn.jit.instantiator"), "_TEMP_DIR", None)
    return {os.path.basename(held.name)} if held is not None else set()


def pytest_sessionstart(session):
    _run_temp.update(tempdir=_tempfile.tempdir,
                     environ={k: os.environ.get(k) for k in (*_TEMP_VARIABLES, "PYTEST_DEBUG_TEMPROOT")})
    os.environ.setdefault("PYTEST_DEBUG_TEMPROOT", _tempfile.gettempdir())
    private = _run_temp["path"] = _tempfile.mkdtemp(prefix="dmlshim-test-run-")
    os.environ.update(dict.fromkeys(_TEMP_VARIABLES, private))
    _tempfile.tempdir = private
    try:
        from hypothesis.configuration import set_hypothesis_home_dir
    except ImportError:
        return
    cache = getattr(session.config, "cache", None)
    set_hypothesis_home_dir(cache.mkdir("hypothesis") if cache is not None else _Path(private, "hypothesis"))


def pytest_sessionfinish(session, exitstatus):
    _ran_none[:] = _required_files_that_ran_none(session.config.rootpath)
    if _ran_none and session.exitstatus == pytest.ExitCode.OK:
        session.exitstatus = pytest.ExitCode.TESTS_FAILED
    private = _run_temp.pop("path", None)
    if private is None:
        return
    _tempfile.tempdir = _run_temp["tempdir"]
    for key, value in _run_temp["environ"].items():
        if value is None:
            os.environ.pop(key, None)
        else:
            os.environ[key] = value
    held = _held_by_libraries()
    _run_temp["left"] = sorted(n for n in os.listdir(private)
                               if not _ALLOWED_IN_TEMP.fullmatch(n) and n not in held)
    _shutil.rmtree(private, ignore_errors=True)
    if _run_temp["left"] and session.exitstatus == pytest.ExitCode.OK:
        session.exitstatus = pytest.ExitCode.TESTS_FAILED


def pytest_terminal_summary(terminalreporter):
    _device_summary(terminalreporter)
    left = _run_temp.get("left")
    if left:
        terminalreporter.section("files left in the temp directory", sep="=", red=True, bold=True)
        terminalreporter.line("The run wrote these outside tmp_path (now removed); write them under "
                              "tmp_path / tmp_path_factory instead:")
        for name in left:
            terminalreporter.line(f"  {name}")


# --- What ran on which device (issue 25) -------------------------------------------------
# A run on the real device says how much of the suite the real device ran and how much it
# skipped as emulator-only, so a green run cannot hide a growing list of markers; per file
# too, and DMLSHIM_TEST_REQUIRE_REAL (make test-realdml-ci sets it to REALDML_CI_TESTS)
# fails a real device run in which one of the files it names ran no test there: a file
# whose every test came to skip would otherwise stay in the real lane, green, testing nothing.
from collections import Counter as _Counter  # noqa: E402

_OUTCOMES = ("ran", "emulated_only", "skipped")
_outcomes = dict.fromkeys(_OUTCOMES, 0)
_by_file = {}                   # test file (as in the node id) -> Counter of _OUTCOMES
_ran_none = []                  # DMLSHIM_TEST_REQUIRE_REAL's files that ran no test


def pytest_runtest_logreport(report):
    if report.when == "call" or (report.when == "setup" and not report.passed):
        if not report.skipped or hasattr(report, "wasxfail"):     # an xfail ran too
            outcome = "ran"
        elif "emulated_only" in report.keywords:
            outcome = "emulated_only"
        else:
            outcome = "skipped"
        _outcomes[outcome] += 1
        _by_file.setdefault(report.nodeid.split("::")[0], _Counter())[outcome] += 1


def _required_files_that_ran_none(rootpath) -> list:
    """The files DMLSHIM_TEST_REQUIRE_REAL names (whitespace-separated paths) in which no test
    ran on the real device; [] off a real device."""
    if _REAL is None:
        return []
    ran = {_Path(rootpath, f).resolve() for f, counts in _by_file.items() if counts["ran"]}
    required = os.environ.get("DMLSHIM_TEST_REQUIRE_REAL", "").split()
    return [f for f in required if _Path(rootpath, f).resolve() not in ran]


def _device_summary(terminalreporter):
    if not any(_outcomes.values()):
        return
    where = "the real DirectML device" if _REAL is not None else "the emulated DirectML device"
    if _REAL is not None and len(_by_file) > 1:
        for path, counts in sorted(_by_file.items()):
            terminalreporter.line(f"{path}: {counts['ran']} ran, {counts['emulated_only']} "
                                  f"emulated_only, {counts['skipped']} skipped otherwise")
    terminalreporter.line(
        f"{_outcomes['ran']} tests ran on {where}, {_outcomes['emulated_only']} skipped "
        f"(emulated_only), {_outcomes['skipped']} skipped otherwise")
    if _ran_none:
        terminalreporter.section("real lane files that ran no test", sep="=", red=True, bold=True)
        terminalreporter.line("DMLSHIM_TEST_REQUIRE_REAL names these, but none of their tests ran on "
                              "the real device (all skipped, or not collected):")
        for path in _ran_none:
            terminalreporter.line(f"  {path}")
