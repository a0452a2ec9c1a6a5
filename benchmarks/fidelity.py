"""The emulator held to the real torch-directml 0.2.5 binary: defects and inference_mode.

For every defect dmlshim knows (``dmlshim.probing.all_defects()``: its probe, or for a
static one a repro here) and every default rule of the emulator no probe covers
(``EXTRA``), the same call runs, raw (no ``activate()``), on four devices:

* ``emulated``: the emulated device, default rules, no float64 (``has_float64_support=False``)
* ``emulated-fp64``: the same with ``has_float64_support=True``
* ``real``: torch-directml 0.2.5 on ``dmlshim realdml`` with ``--no-fp64`` (a consumer GPU)
* ``real-fp64``: the same with ``--fp64`` (a GPU with float64)

Each device runs in its own child process; a static defect (an abort: bf16, complex,
nn.PReLU(C)) runs in a child of its own, and an abort is recorded as such.  Each call's
outcome against the CPU is a class (``observe``): equal, wrong values / shape / dtype /
device, raised, aborted (a dead child, or the emulator's FatalDirectMLError), hung.  A row
agrees when the emulated and the real class match, with each output's dtype and shape for a
result, the error's type and first words (an HRESULT by its name) for a raise.  Then the
``inference_mode`` sweep (failure_modes.md #41): common modules and functional calls on
tensors moved to the device before, called inside ``torch.inference_mode()``, raw and
with ``dmlshim.activate()``; CPU work that dmlshim adds is counted (``dmlshim.trace``).

Usage (the torch 2.4.1 + torch-directml venv, the stack built)::

    python benchmarks/fidelity.py [--out benchmarks/results/fidelity-defects.json]

Docs: docs/fidelity.md ("Defects"), its table generated from the JSON.
"""
from __future__ import annotations

import argparse
import datetime
import functools
import json
import os
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
DEVICES = ("emulated", "emulated-fp64", "real", "real-fp64")
# real vs emulated, per float64 profile
PAIRS = (("emulated", "real"), ("emulated-fp64", "real-fp64"))
CHILD_TIMEOUT = 300


# ------------------------------------------------------------------ the repros

def _static_cases():
    """Repros of the static defects (never probed in a user's process: they abort it)."""
    import torch

    def bfloat16(d):
        return torch.ones(2, dtype=torch.bfloat16).to(d) * 2

    def complex_(d):
        return torch.ones(2, dtype=torch.complex64).to(d) * 2

    def prelu_channels(d):
        torch.manual_seed(0)
        prelu, x = torch.nn.PReLU(4), torch.randn(1, 4, 3, 3)
        with torch.no_grad():
            return prelu.to(d)(x.to(d))

    def sparse(d):
        s = torch.eye(3).to_sparse().to(d)
        return (s + s).to_dense()

    def flip_dims(d):
        return torch.arange(6.0).view(2, 3).to(d).flip(-1)

    def bmm_cpu_operand(d):
        return torch.bmm(torch.ones(1, 2, 3).to(d), torch.ones(1, 3, 2))

    def sort_scalar(d):
        # the functional sort of a 0-dim tensor: its values silently 0 (not the out= kernel,
        # whose invalid returned tensors end the process when read)
        return torch.sort(torch.tensor(1.5).to(d))

    def rank_limit(d):
        return (torch.arange(24.0) % 7).view(2, 1, 2, 3, 1, 2).to(d).sum(-1)

    from dmlshim import probing
    return {"bfloat16": bfloat16, "complex": complex_, "prelu_channels": prelu_channels,
            "sparse": sparse, "flip_dims": flip_dims,
            "bmm_cpu_operand": bmm_cpu_operand, "sort_scalar": sort_scalar, "rank_limit": rank_limit,
            # the rows kept beside their fixes carry their own (Defect.repro)
            **{d.name: d.repro for d in probing.all_defects() if d.static and d.repro is not None}}


def _extra_cases():
    """The emulator's default rules no dmlshim probe covers: (name, row, case)."""
    import torch
    import torch.nn.functional as F

    def rsub_float(d):
        """`1.0 - x`, x f32[3] (the 1.0 is a Double scalar)"""
        return 1.0 - torch.tensor([0.5, 1.0, 2.0]).to(d)

    def conv_bool(d):
        """conv1d of a bool input (FunASR's mask)"""
        return F.conv1d(torch.tensor([[[True, False, True, True]]]).to(d).float(),
                        torch.ones(1, 1, 2).to(d)), F.conv1d(
            torch.tensor([[[True, False, True, True]]]).to(d), torch.ones(1, 1, 2).to(d))

    def cpu_operand(d):
        """index_select, masked_fill, conv1d with one CPU operand"""
        x = torch.arange(12.0).view(3, 4).to(d)
        return (torch.index_select(x, 0, torch.tensor([0, 2])),
                x.masked_fill(torch.tensor([True, False, True, False]), 0.0),
                F.conv1d(x[None], torch.ones(2, 3, 2)))

    def cpu_binary(d):
        """x + y, x on the device, y a 2-D CPU tensor"""
        x = torch.arange(6.0).view(2, 3)
        return x.to(d) + x

    def cpu_matmul(d):
        """mm of a device and a CPU matrix"""
        x = torch.arange(6.0).view(2, 3)
        return torch.mm(x.to(d), x.t())

    def full_reduction(d):
        """`ones(9).sum()`, `arange(12).max()`, `arange(12).mean()` (no dim)"""
        return (torch.ones(9).to(d).sum(), torch.arange(12.0).to(d).max(),
                torch.arange(12.0).to(d).mean())

    return [("rsub_float", "#7", rsub_float), ("conv_bool", "none (DESIGN.md)", conv_bool),
            ("cpu_operand", "#10", cpu_operand), ("cpu_binary", "#10", cpu_binary),
            ("cpu_matmul", "#10", cpu_matmul), ("full_reduction", "none (this stack)", full_reduction)]


# Rows where the emulator and the real binary may rightly differ, with the evidence.
SPECIFIC = {
    "non_blocking_copy": "a race, not modelled: the real binary's non-blocking copy reads the source's "
                         "memory after it is freed, so its outcome varies run to run (some of the "
                         "copies equal, the others zeros or garbage, or an abort: malloc() finds the "
                         "heap it corrupted); the emulator gives zeros every time and never ends the "
                         "process.",
    "full_reduction": "a stack artifact, patched: before vkd3d-proton-dxil-spirv-tgsm-constant-"
                      "gep.patch a reduction over all of 8 or more elements read every second "
                      "element twice on vkd3d-proton + lavapipe (ones(9).sum() was 10), with no "
                      "`err:` line (docs/realdml.md, 'Stack artifacts'); the emulator does not "
                      "model it.",
    "new_device_index": "the emulator cannot model it on torch 2.4.1: its from_dlpack refuses a "
                        "privateuseone tensor without an index, so the emulated x.new(2) keeps "
                        "the index there (on torch >= 2.5 it is modelled; tests/test_legacy_new.py).",
    "upsample_nearest": "not modelled: torch-directml reuses the operator it built first for a shape "
                        "(docs/defects.md, 'Upsampling'), so on the real binary the probe's second call "
                        "(by size, after scale 1.7 on the same shape) is wrong too; the emulator keeps no "
                        "such state and gets it right.",
    "out_resize": "not modelled, twice: the real binary's mul.out returns a new, right tensor and leaves "
                  "the empty out= as it is; a Python kernel's caller gets its out= argument back "
                  "(torch.mul(x, 2, out=o) is o on the emulated device, torch 2.4.1 and 2.13), so the "
                  "emulated call returns the empty out (shape [0]). And the real binary writes a float "
                  "times a bool into a bool out=; the emulator computes on the CPU, which refuses the cast.",
}


def _inference_cases():
    """(name, build, call): ``build()`` on the CPU, moved to the device outside inference
    mode (as a loaded model is), then ``call(module_or_tensors, x)`` inside it."""
    import torch
    import torch.nn as nn
    import torch.nn.functional as F

    def m(module, *shape):
        return lambda: (module(), torch.linspace(-2, 2, int(torch.tensor(shape).prod())).view(*shape))

    def t(*shape):
        return lambda: (torch.linspace(-1, 1, int(torch.tensor(shape).prod())).view(*shape),
                        torch.linspace(-2, 2, int(torch.tensor(shape).prod())).view(*shape))

    call = lambda mod, x: mod(x)                                          # noqa: E731
    torch.manual_seed(0)
    return [
        ("nn.Linear", m(lambda: nn.Linear(4, 3), 2, 4), call),
        ("nn.Conv1d", m(lambda: nn.Conv1d(2, 3, 3), 1, 2, 8), call),
        ("nn.Conv2d", m(lambda: nn.Conv2d(2, 3, 3, padding=1), 1, 2, 5, 5), call),
        ("nn.ConvTranspose2d", m(lambda: nn.ConvTranspose2d(2, 3, 2, stride=2), 1, 2, 3, 3), call),
        ("nn.BatchNorm2d (eval)", m(lambda: nn.BatchNorm2d(2).eval(), 2, 2, 3, 3), call),
        ("nn.BatchNorm1d (train)", m(lambda: nn.BatchNorm1d(3), 4, 3), call),
        ("nn.LayerNorm", m(lambda: nn.LayerNorm(4), 2, 4), call),
        ("nn.GroupNorm", m(lambda: nn.GroupNorm(2, 4), 1, 4, 3), call),
        ("nn.InstanceNorm1d", m(lambda: nn.InstanceNorm1d(2), 1, 2, 5), call),
        ("nn.Embedding", lambda: (nn.Embedding(5, 3), torch.tensor([[0, 4, 2]])), call),
        ("nn.MultiheadAttention", m(lambda: nn.MultiheadAttention(4, 2), 3, 1, 4),
         lambda mod, x: mod(x, x, x)[0]),
        ("nn.TransformerEncoderLayer", m(lambda: nn.TransformerEncoderLayer(4, 2, 8, dropout=0.0).eval(),
                                         3, 1, 4), call),
        ("nn.GRUCell", m(lambda: nn.GRUCell(3, 4), 2, 3), call),
        ("nn.PReLU()", m(lambda: nn.PReLU(), 2, 4), call),
        ("nn.MaxPool2d", m(lambda: nn.MaxPool2d(2), 1, 1, 4, 4), call),
        ("nn.AdaptiveAvgPool2d", m(lambda: nn.AdaptiveAvgPool2d(2), 1, 2, 4, 4), call),
        ("nn.Upsample(nearest, 2)", m(lambda: nn.Upsample(scale_factor=2), 1, 1, 2, 3), call),
        ("nn.Sequential(Linear, GELU, Linear)", m(lambda: nn.Sequential(nn.Linear(4, 8), nn.GELU(),
                                                                       nn.Linear(8, 2)), 3, 4), call),
        ("x.t() @ w", t(3, 4), lambda w, x: x @ w.t()),
        ("w.view / reshape", t(3, 4), lambda w, x: w.view(4, 3) + x.reshape(4, 3)),
        ("w.permute / transpose", t(2, 3, 4), lambda w, x: w.permute(2, 0, 1) * x.transpose(0, 2).transpose(1, 2)),
        ("w[1:], w[:, 0], w.narrow", t(3, 4), lambda w, x: w[1:] + w[:, 0:1].narrow(0, 1, 2) + x[1:]),
        ("w.expand / unsqueeze / squeeze", t(1, 4), lambda w, x: w.unsqueeze(0).expand(2, 3, 4).squeeze(1) + x),
        ("w.split / chunk / unbind", t(4, 2), lambda w, x: torch.stack([*w.split(2), *x.chunk(2)]).sum(0)
         + torch.stack(w.unbind(0)).sum(0)),
        ("w.flatten / diagonal", t(3, 3), lambda w, x: w.flatten() [:3] + w.diagonal() + x.diagonal()),
        ("F.softmax / log_softmax", t(2, 5), lambda w, x: F.softmax(w, -1) + F.log_softmax(x, -1)),
        ("F.pad reflect / constant", t(1, 1, 3, 4), lambda w, x: F.pad(w, (1, 1, 1, 1), "reflect")
         + F.pad(x, (1, 1, 1, 1))),
        ("torch.cat / stack", t(2, 3), lambda w, x: torch.cat([w, x]) + torch.stack([x, w]).view(4, 3)),
        ("index_select / gather", t(3, 4), lambda w, x: torch.index_select(w, 0, torch.tensor([2, 0]).to(w.device))
         [:, :1] + torch.gather(x, 1, torch.tensor([[0], [3]]).to(w.device))),
        ("w.add_(x) (in place, normal tensor)", t(2, 3), lambda w, x: w.add_(x) * 1),
        ("torch.where / masked_fill", t(2, 3), lambda w, x: torch.where(w > 0, w, x).masked_fill(x > 1, 0.0)),
        ("w.mean / sum / max (dims)", t(3, 4), lambda w, x: w.mean(0)[:3] + w.sum(1) + x.max(1).values),
    ]


# ------------------------------------------------------------------ outcomes
# What a call did on one device against the CPU, as a class.  A row agrees when both sides
# have the same class and, for a result, the same outputs (class, dtype and shape of each
# tensor), for an error the same type and first words; values that are wrong on both sides
# may differ.  The probes' own verdicts (broken, figure) are kept to show, not compared.
EQUAL, VALUES, SHAPE, DTYPE, DEVICE = "equal", "wrong values", "wrong shape", "wrong dtype", "wrong device"
RAISED, ABORTED, HUNG = "raised", "aborted", "hung"
FIRST_WORDS = 3       # past them, messages carry paths and op names the emulator renders generically


def observe(probe, device):
    """``probe(device)`` run as it is, with its raw results classified (see above)."""
    case = _case_of(probe)
    if case is not None:
        return _observe_case(case, device)
    if not probe.__module__.startswith("dmlshim.catalogue."):  # its calls would go unseen
        raise TypeError(f"{probe.__name__}: neither a case probe nor a catalogue module's own")
    return _observe_core(probe, device)


def _case_of(probe):
    """The call a ``catalogue.probes.case_probe`` probe compares (``probe.case``), or None:
    the hand-written probes make and compare their own calls."""
    return getattr(probe, "case", None)


def _observe_case(case, device):
    """``case_probe(case)`` as it runs, keeping what ``case`` returned or raised."""
    from dmlshim.catalogue.probes import case_probe, differ
    seen = {}

    def capture(d):
        try:
            seen[str(d)] = case(d)
        except Exception as exc:
            seen[str(d)] = exc
            raise
        return seen[str(d)]

    try:
        verdict = case_probe(capture)(device)
    except Exception as exc:                   # the CPU's call failed: the repro's own error
        return _raised(exc)
    got = seen[str(device)]
    if isinstance(got, Exception):
        return _raised(got)
    return _result(verdict, _outputs(got, seen["cpu"], differ))


def _observe_core(probe, device):
    """A hand-written probe as it runs, each (device, CPU) pair it compares recorded."""
    from unittest import mock
    module = sys.modules[probe.__module__]
    compare, outputs = module.compare, []

    def recording(got, want, *tolerance):
        outputs.extend(_outputs(got, want, lambda g, w: compare(g, w, *tolerance)))
        return compare(got, want, *tolerance)

    with mock.patch.object(module, "compare", recording):
        try:
            verdict = probe(device)
        except Exception as exc:
            return _raised(exc)
    return _result(verdict, outputs)


def _outputs(got, want, differ):
    """[class, dtype, shape] of each tensor of a result; ``differ(g, w)``: the probe's own
    comparison (its tolerance: a GPU's rounding is not a defect)."""
    import torch
    got, want = _flat(got), _flat(want)
    if len(got) != len(want):
        return [[SHAPE, "outputs", [len(got)]]]
    rows = []
    for g, w in zip(got, want):
        if not isinstance(w, torch.Tensor):
            rows.append([EQUAL if g == w else VALUES, type(g).__name__, None])
            continue
        g = g.cpu()
        kind = (SHAPE if g.shape != w.shape else DTYPE if g.dtype != w.dtype
                else VALUES if differ(g, w).broken else EQUAL)
        rows.append([kind, str(g.dtype).replace("torch.", ""), list(g.shape)])
    return rows


def _flat(x):
    return [y for item in x for y in _flat(item)] if isinstance(x, (tuple, list)) else [x]


def _result(verdict, outputs):
    wrong = [kind for kind, _, _ in outputs if kind != EQUAL]
    # broken with every comparison equal: the probe's own check, x.new()'s device
    kind = wrong[0] if wrong else DEVICE if verdict.broken else EQUAL
    return {"class": kind, "outputs": outputs, "broken": verdict.broken, "figure": verdict.figure}


def _raised(exc):
    """The emulator's FatalDirectMLError stands for the binary's abort: the same class."""
    lines = str(exc).strip().splitlines()
    figure = f"{type(exc).__name__}: {lines[0] if lines else ''}"[:200]
    if type(exc).__name__ == "FatalDirectMLError":
        return {"class": ABORTED, "broken": True, "figure": figure}
    return {"class": RAISED, "words": first_words(exc), "broken": True, "figure": figure}


def first_words(exc):
    """Type and first words; an HRESULT by its name (the emulator renders E_INVALIDARG as
    Windows does, 'The parameter is incorrect.'; the binary on Linux 'Unknown error
    -2147024809')."""
    from dmlshim import errors
    lines = str(exc).strip().splitlines()
    hresult = errors.recognise(lines[0]) if lines else None
    words = hresult.name if hresult else " ".join((lines[0] if lines else "").split()[:FIRST_WORDS])
    return f"{type(exc).__name__}: {words}"


def bounded(fn, timeout=60.0):
    """``fn()`` in a worker thread, at most ``timeout`` s: a hung DirectML call cannot be
    interrupted (as ``probing.run_probe``)."""
    box = []

    def run():
        try:
            box.append(fn())
        except BaseException as exc:          # fidelity's own error: raised here, not "hung"
            box.append(exc)

    worker = threading.Thread(target=run, daemon=True)
    worker.start()
    worker.join(timeout)
    if box and isinstance(box[0], BaseException):
        raise box[0]
    return box[0] if box else {"class": HUNG, "broken": True, "figure": f"timed out after {timeout:g} s"}


def agree(emu, real):
    """Same class, and for a result the same outputs, for an error the same first words."""
    if emu is None or real is None:
        return False
    return (emu["class"] == real["class"] and emu.get("outputs") == real.get("outputs")
            and emu.get("words") == real.get("words"))


# ------------------------------------------------------------------ children

def _device(kind):
    if kind.startswith("real"):
        import torch_directml
        return torch_directml.device()
    from dmlshim import emulation
    device = emulation.install()
    emulation.configure(has_float64_support=kind.endswith("fp64"))
    return device


def child_probes(kind):
    """Every probing defect and EXTRA case on ``kind``'s device, raw: its outcome."""
    import warnings
    warnings.simplefilter("ignore")
    from dmlshim import probing
    from dmlshim.catalogue.probes import case_probe
    device = _device(kind)
    probes = [(d.name, d.probe) for d in probing.all_defects() if not d.static]
    probes += [(name, case_probe(case)) for name, _, case in _extra_cases()]
    return {name: bounded(functools.partial(observe, probe, device)) for name, probe in probes}


def child_static(kind, name):
    """One static defect's repro on ``kind``'s device (this process may be aborted)."""
    from dmlshim.catalogue.probes import case_probe
    return observe(case_probe(_static_cases()[name]), _device(kind))


def child_inference(kind):
    """The inference_mode sweep on ``kind``'s device: raw, then with dmlshim.activate()."""
    import warnings
    warnings.simplefilter("ignore")
    import torch
    device = _device(kind)
    rows = {name: {"raw": _inference_once(build, call, device)} for name, build, call in _inference_cases()}
    import dmlshim
    from dmlshim import trace
    dmlshim.activate()
    for name, build, call in _inference_cases():
        results = {}
        for mode in ("no_grad", "inference_mode"):
            trace.reset()
            verdict = _inference_once(build, call, device, mode)
            verdict["cpu_calls"] = sum(r["actions"].get("cpu", 0) for r in trace.report().rows)
            results[mode] = verdict
        fixed = dict(results["inference_mode"])
        # a CPU retry caused by inference mode: more CPU work than the same call under no_grad
        fixed["extra_cpu_calls"] = fixed["cpu_calls"] - results["no_grad"]["cpu_calls"]
        rows[name]["activated"] = fixed
    dmlshim.deactivate()
    return rows


def _inference_once(build, call, device, mode="inference_mode"):
    import torch
    from dmlshim.catalogue.probes import differ as _differ
    torch.manual_seed(0)
    module, x = build()
    with torch.no_grad():
        want = call(module, x)
    torch.manual_seed(0)
    module, x = build()
    module, x = module.to(device), x.to(device)
    try:
        with (torch.inference_mode() if mode == "inference_mode" else torch.no_grad()):
            got = call(module, x)
    except Exception as exc:
        return {"ok": False, "figure": f"{type(exc).__name__}: {str(exc).strip().splitlines()[0][:160]}"}
    verdict = _differ(got, want)
    return {"ok": not verdict.broken and got.device == device, "figure": verdict.figure,
            "on_device": got.device == device}


CHILDREN = {"probes": child_probes, "static": child_static, "inference": child_inference}


# ------------------------------------------------------------------ the parent

def _env(kind):
    env = {**os.environ, "PYTHONPATH": f"{ROOT}{os.pathsep}{os.environ.get('PYTHONPATH', '')}",
           "DMLSHIM_PROBE": "refresh"}
    if kind.startswith("real"):
        from dmlshim.realdml import stack
        env.update(stack.current().environment(fp64=kind.endswith("fp64")))
    return env


def run_child(python, kind, what, *args):
    """``what`` on ``kind``'s device in a child: its JSON, or ``{"abort": ...}``."""
    cmd = [python, str(Path(__file__)), "--child", what, "--device", kind, *args]
    done = subprocess.run(cmd, env=_env(kind), capture_output=True, text=True, timeout=CHILD_TIMEOUT,
                          cwd=str(ROOT))
    lines = [line for line in done.stdout.splitlines() if line.startswith("{")]
    if done.returncode == 0 and lines:
        return json.loads(lines[-1])
    how = (f"signal {signal.Signals(-done.returncode).name}" if done.returncode < 0
           else f"exit {done.returncode}")
    fatal = [line for line in done.stderr.splitlines() if line.startswith("[F ")]
    err = (fatal or done.stderr.strip().splitlines() or [""])[-1][:200]
    return {"abort": f"process died ({how}): {err}"}


def _stack_info():
    from dmlshim.realdml import stack
    s = stack.current()
    facts = s.facts()
    return {"versions": facts["versions"], "patches": facts["patches"], "built": facts["built"],
            "adapter": {fp: stack.probe_device(s, fp64=fp64, python=ARGS.python)
                        for fp, fp64 in (("fp64-off", False), ("fp64-on", True))}}


def _versions(python):
    code = ("import json, torch, importlib.metadata as m; print(json.dumps({'torch': torch.__version__, "
            "'torch_directml': m.version('torch-directml')}))")
    return json.loads(subprocess.run([python, "-c", code], capture_output=True, text=True,
                                     check=True).stdout)


def compare(defects, results):
    """One row per defect: the outcome on each device and whether they agree."""
    rows = []
    for name, row, source in defects:
        outcomes = {kind: _outcome(results[kind].get(name)) for kind in DEVICES}
        pairs = {f"{emu} = {real}": agree(outcomes[emu], outcomes[real]) for emu, real in PAIRS}
        rows.append({"name": name, "row": row, "source": source, "outcomes": outcomes,
                     "agree": all(pairs.values()), "pairs": pairs, "specific": SPECIFIC.get(name)})
    return rows


def _outcome(result):
    """A child's outcome; a child that died (run_child's ``abort``) aborted."""
    if result is not None and "abort" in result:
        return {"class": ABORTED, "broken": True, "figure": result["abort"]}
    return result


def main():
    global ARGS
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--out", default=str(ROOT / "benchmarks" / "results" / "fidelity-defects.json"))
    parser.add_argument("--python", default=sys.executable,
                        help="the interpreter with torch 2.4.1 and torch-directml 0.2.5 (default: this one)")
    parser.add_argument("--child", choices=sorted(CHILDREN), help=argparse.SUPPRESS)
    parser.add_argument("--device", choices=DEVICES, help=argparse.SUPPRESS)
    parser.add_argument("name", nargs="?", help=argparse.SUPPRESS)
    ARGS = parser.parse_args()
    if ARGS.child:
        result = CHILDREN[ARGS.child](ARGS.device, *([ARGS.name] if ARGS.name else []))
        print(json.dumps(result), flush=True)
        return 0

    sys.path.insert(0, str(ROOT))
    from dmlshim import probing
    import timing
    start = time.perf_counter()
    defects = [(d.name, d.row, d.source) for d in probing.all_defects()]
    defects += [(name, row, "rules.py default rule") for name, row, _ in _extra_cases()]
    results, inference = {}, {}
    for kind in DEVICES:
        t0 = time.perf_counter()
        results[kind] = run_child(ARGS.python, kind, "probes")
        for name in (d.name for d in probing.all_defects() if d.static):
            results[kind][name] = run_child(ARGS.python, kind, "static", name)
        if not kind.endswith("fp64"):
            inference[kind] = run_child(ARGS.python, kind, "inference")
        print(f"{kind}: {time.perf_counter() - t0:.1f} s", file=sys.stderr)
    data = {"benchmark": "fidelity-defects", "rows": compare(defects, results),
            "inference_mode": inference, "machine": {**timing.machine(), **_versions(ARGS.python)},
            "stack": _stack_info(), "seconds": round(time.perf_counter() - start, 1),
            "date": datetime.datetime.now(datetime.timezone.utc).strftime("%Y-%m-%d %H:%M UTC")}
    with open(ARGS.out, "w", encoding="utf-8") as f:
        json.dump(data, f, indent=1, ensure_ascii=False)
    differ = [r["name"] for r in data["rows"] if not r["agree"]]
    bad = [name for name in differ if not SPECIFIC.get(name)]
    print(f"{len(data['rows'])} rows, {len(differ)} differ, {len(bad)} without a reason: {', '.join(bad) or '-'}; "
          f"{data['seconds']} s; wrote {ARGS.out}")
    return 0


ARGS = None

if __name__ == "__main__":
    sys.exit(main())
