"""What ``activate()`` costs once a DirectML device is present: CPU calls, and device calls
with nothing to fix, before and after, with the compiled gate and without it.

One process with the emulated DirectML device installed (``dmlshim.emulation``), so
``activate()`` probes it and installs the fixes it needs. Each call is timed in three
variants, interleaved round by round (benchmarks/timing.py): ``no activate()``,
``activate(), gate: python`` (``DMLSHIM_GATE=python``: the fixes' Python kernels at
BackendSelect, as on a machine with no C++ compiler) and ``activate(), gate: compiled``
(the default where a compiler exists: ``dmlshim/patches/_gate.py``). Each figure is the
minimum and median of the rounds of 1,000 calls; a note gives min / min and the time
added per call (min). Goals (issue 38): CPU calls <= 1.05x, device pass-through <= 3 us.
The emulated device computes on the CPU with Python kernels of its own, so a device
call's own time is not a GPU's; what the shim adds carries over.

With ``--device directml`` the same runs on the real torch-directml 0.2.5 (under
``python -m dmlshim realdml run --``, docs/realdml.md; ``device_present-realdml.json``):
lavapipe is a CPU, so only what the shim adds means something there.

With ``--installed`` it times the dmlshim installed in the running Python instead of this
checkout's, and requires its gate to be the wheel's prebuilt one: the users' configuration,
no compiler on PATH (``device_present-prebuilt-torch<version>.json``, with ``--device
directml`` ``device_present-realdml-prebuilt.json``; docs/performance.md says how).

Run: ``python benchmarks/device_present.py [--quick] [--json PATH] [--device D] [--installed]``
(default ``benchmarks/results/device_present-torch<version>.json``).
"""
import os
import sys
from pathlib import Path

import torch
import torch.nn.functional as F

import timing

if "--installed" not in sys.argv:                                   # else the installed wheel's
    sys.path.insert(0, str(Path(__file__).resolve().parent.parent))    # this checkout's dmlshim

BEFORE, PYTHON, COMPILED = "no activate()", "activate(), gate: python", "activate(), gate: compiled"
NUMBER = 1000               # calls per round


def cases(dev):
    """``{name: zero-argument call}``: issue 38's calls on small tensors, on the CPU and on
    ``dev``, none of which needs a fix, and issue 48's integer calls of token ids whose range
    int_range knows (:data:`IDS`); and three device calls of the aten overloads themselves
    (the gate's part of the device rows)."""
    a, b = torch.rand(64), torch.rand(64)
    m, w, bias = torch.rand(8, 8), torch.rand(8, 8), torch.rand(8)
    x, k = torch.rand(1, 4, 16), torch.rand(4, 4, 3)
    out = {}
    for where, move in (("cpu", lambda t: t), ("device", lambda t: t.to(dev))):
        a_, b_, m_, w_, bias_, x_, k_ = map(move, (a, b, m, w, bias, x, k))
        ids = (lambda: IDS["cpu"]) if where == "cpu" else (lambda: IDS["device"])
        out.update({
            f"{where}: a * b": lambda a_=a_, b_=b_: a_ * b_,
            f"{where}: a + b": lambda a_=a_, b_=b_: a_ + b_,
            f"{where}: a.view(8, 8)": lambda a_=a_: a_.view(8, 8),
            f"{where}: a[1:]": lambda a_=a_: a_[1:],
            f"{where}: torch.cat([a, b])": lambda a_=a_, b_=b_: torch.cat([a_, b_]),
            f"{where}: F.conv1d": lambda x_=x_, k_=k_: F.conv1d(x_, k_),
            f"{where}: F.linear 8x8": lambda m_=m_, w_=w_, bias_=bias_: F.linear(m_, w_, bias_),
            f"{where}: torch.matmul 8x8": lambda m_=m_: torch.matmul(m_, m_),
            f"{where}: a.to(float16)": lambda a_=a_: a_.to(torch.float16),
            f"{where}: int64 i + 1": lambda ids=ids: ids() + 1,
            f"{where}: int64 i > 3": lambda ids=ids: ids() > 3,
            f"{where}: int64 i.clone()": lambda ids=ids: ids().clone(),
        })
    # the aten overloads themselves, no Python-level wrapper of dmlshim's on the way: what the
    # compiled gate alone adds to a device call (the rows above add the wrappers')
    aten = torch.ops.aten
    a_, b_ = a.to(dev), b.to(dev)
    out.update({
        "device (aten, no wrapper): mul.Tensor": lambda: aten.mul.Tensor(a_, b_),
        "device (aten, no wrapper): cat": lambda: aten.cat.default([a_, b_]),
        "device (aten, no wrapper): _to_copy float16": lambda: aten._to_copy.default(a_, dtype=torch.float16),
    })
    return out


# int64 token ids, copied over again after each variant's activate(): so int_range knows
# their range, as it knows an upload's (an upload before activate() has none, and x + n then
# stays two tensors on the device without a read)
IDS = {"cpu": torch.arange(64)}


def _upload(dev):
    IDS["device"] = IDS["cpu"].to(dev)


def _activate(gate, dev):
    def setup():
        import dmlshim
        dmlshim.deactivate()
        os.environ["DMLSHIM_GATE"] = gate
        dmlshim.activate(trace=0)
        _upload(dev)
    return setup


def _deactivate(dev):
    def setup():
        import dmlshim
        dmlshim.deactivate()
        _upload(dev)
    return setup


def main():
    parser = timing.arg_parser(__doc__.splitlines()[0])
    parser.add_argument("--repeats", type=int, default=15, help="rounds of 1,000 calls (default 15)")
    parser.add_argument("--device", choices=("emulated", "directml"), default="emulated",
                        help="the emulated device (default) or the real torch-directml")
    parser.add_argument("--installed", action="store_true",
                        help="the installed dmlshim, whose gate must be the wheel's prebuilt one")
    args = parser.parse_args()
    import dmlshim
    from dmlshim import emulation, probing
    from dmlshim.patches import _gate

    prebuilt = "-prebuilt" if args.installed else ""
    if args.device == "directml":
        import torch_directml
        dev = torch_directml.device()
        if args.json is None and not args.quick:
            args.json = timing.results_path(f"device_present-realdml{prebuilt}.json")
    else:
        timing.default_json(args, f"device_present{prebuilt}")
        dev = emulation.install()
    compiled = _gate.extension("auto") is not None
    origin = _gate.status().origin
    if args.installed and origin != "prebuilt":
        parser.error(f"--installed: the gate is {origin!r}, not the wheel's prebuilt one ({_gate.status().reason})")
    dmlshim.activate(trace=0)                # probe once; each turn's activate() reuses the verdicts,
    detection = probing.last()               # as the cache does for a real adapter (the emulated
    probing.detect = lambda *args, **kwargs: detection     # device's are never cached)
    dmlshim.deactivate()
    torch.set_num_threads(1)
    setup = {BEFORE: _deactivate(dev), PYTHON: _activate("python", dev)}
    if compiled:
        setup[COMPILED] = _activate("compiled", dev)
    _upload(dev)
    rows, repeats = [], 2 if args.quick else args.repeats
    number = NUMBER // 5 if args.quick else NUMBER
    for case, call in cases(dev).items():
        t = timing.measure({v: call for v in setup}, setup=setup, repeats=repeats, number=number,
                           warmup=1 if args.quick else 2)
        note = "; ".join(f"{v}: min ratio {t[v].min_s / t[BEFORE].min_s:.3f}x, added "
                         f"{(t[v].min_s - t[BEFORE].min_s) * 1e6:+.3f} us/call (min)" for v in setup if v != BEFORE)
        rows += timing.rows(case, t, baseline=BEFORE, note=note)
    dmlshim.deactivate()
    where = "the real torch-directml on lavapipe" if args.device == "directml" else "the emulated device"
    timing.finish(args, "device_present", rows, {"torch": torch.__version__, "device": f"{dev} ({where})",
                                                 "compiled_gate": compiled, "gate_origin": origin,
                                                 "threads": 1, "number": number})


if __name__ == "__main__":
    main()
