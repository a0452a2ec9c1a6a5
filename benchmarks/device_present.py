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

Run: ``python benchmarks/device_present.py [--quick] [--json PATH] [--device D]`` (default
``benchmarks/results/device_present-torch<version>.json``).
"""
import os
import sys
from pathlib import Path

import torch
import torch.nn.functional as F

import timing

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))    # this checkout's dmlshim

BEFORE, PYTHON, COMPILED = "no activate()", "activate(), gate: python", "activate(), gate: compiled"
NUMBER = 1000               # calls per round


def cases(dev):
    """``{name: zero-argument call}``: issue 38's calls on small tensors, on the CPU and on
    ``dev``, none of which needs a fix, and issue 48's integer calls of a range int_range
    knows (an activated variant reads it once after its ``activate()``, as a model's first
    call would); and three device calls of the aten overloads themselves (the gate's part of
    the device rows)."""
    a, b = torch.rand(64), torch.rand(64)
    m, w, bias = torch.rand(8, 8), torch.rand(8, 8), torch.rand(8)
    x, k = torch.rand(1, 4, 16), torch.rand(4, 4, 3)
    i = torch.arange(64)          # int64 token ids: their range is known once copied over
    out = {}
    for where, move in (("cpu", lambda t: t), ("device", lambda t: t.to(dev))):
        a_, b_, m_, w_, bias_, x_, k_, i_ = map(move, (a, b, m, w, bias, x, k, i))
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
            f"{where}: int64 i + 1": lambda i_=i_: i_ + 1,
            f"{where}: int64 i > 3": lambda i_=i_: i_ > 3,
            f"{where}: int64 i.clone()": lambda i_=i_: i_.clone(),
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


def _activate(gate):
    def setup():
        import dmlshim
        dmlshim.deactivate()
        os.environ["DMLSHIM_GATE"] = gate
        dmlshim.activate(trace=0)
    return setup


def main():
    parser = timing.arg_parser(__doc__.splitlines()[0])
    parser.add_argument("--repeats", type=int, default=15, help="rounds of 1,000 calls (default 15)")
    parser.add_argument("--device", choices=("emulated", "directml"), default="emulated",
                        help="the emulated device (default) or the real torch-directml")
    args = parser.parse_args()
    import dmlshim
    from dmlshim import emulation, probing
    from dmlshim.patches import _gate

    if args.device == "directml":
        import torch_directml
        dev = torch_directml.device()
        if args.json is None and not args.quick:
            args.json = timing.results_path("device_present-realdml.json")
    else:
        timing.default_json(args, "device_present")
        dev = emulation.install()
    compiled = _gate.extension("auto") is not None
    dmlshim.activate(trace=0)                # probe once; each turn's activate() reuses the verdicts,
    detection = probing.last()               # as the cache does for a real adapter (the emulated
    probing.detect = lambda *args, **kwargs: detection     # device's are never cached)
    dmlshim.deactivate()
    torch.set_num_threads(1)
    setup = {BEFORE: dmlshim.deactivate, PYTHON: _activate("python")}
    if compiled:
        setup[COMPILED] = _activate("compiled")
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
                                                 "compiled_gate": compiled, "threads": 1, "number": number})


if __name__ == "__main__":
    main()
