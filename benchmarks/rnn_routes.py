"""Two routes to the CPU for an RNN on the device: which one should eager code take?

dmlshim could run LSTM/GRU on the CPU with cached weights at two levels (docs/rnn.md):

* ``python wrapper``  the Python-level wrapper dmlshim used to put on
                      ``torch._VF.lstm/gru/lstm_cell/gru_cell`` (what ``nn.LSTM.forward``
                      & co. call), rebuilt here with ``PatchSet.intercept`` exactly as it
                      was installed, around the pristine function;
* ``aten kernel``     what dmlshim does now: ``torch._VF.<name>`` as ``nn.LSTM`` calls it
                      after ``activate()``, reaching the kernel on ``aten::lstm``/``gru``/
                      ``*_cell`` at AutogradPrivateUse1 + PrivateUse1;
* ``cpu``             the same call on CPU tensors (no shim work), for scale.

Both shim routes share one weight cache, so no timed call copies weights.  Under
``torch.no_grad()`` (inference), one torch thread, on the emulated device.  Times are
per call; compare the minimums on a busy machine.
"""
import sys
import types
from pathlib import Path

import torch

import timing

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

import dmlshim  # noqa: E402
from dmlshim import emulation, fallback  # noqa: E402
from dmlshim.patches import rnn  # noqa: E402
from dmlshim.patches._wrap import Context, PatchSet  # noqa: E402


def _python_route(names):
    """The former Python-level route: ``PatchSet.intercept`` handlers on the pristine
    ``torch._VF`` functions, held on a namespace of their own."""
    owner = types.SimpleNamespace(**{n: getattr(torch._C._VariableFunctions, n) for n in names})
    patches = PatchSet("rnn_routes")
    for name in names:
        cell = name.endswith("_cell")

        def handle(func, args, kwargs, cell=cell):
            slots = (2, 3, 4, 5) if cell else (3,) if isinstance(args[3], (list, tuple)) else (2,)
            with fallback.guard():
                args = tuple(rnn._cached(a) if i in slots else a for i, a in enumerate(args))
            return "cpu", fallback.run_on_cpu(func, args, kwargs)
        patches.intercept(Context(fallback="known"), owner, name, handle, op=f"_VF.{name}")
    return owner


def _cases(quick):
    torch.manual_seed(0)
    steps = 20 if quick else 100
    lstm64, gru64 = torch.nn.LSTM(64, 64), torch.nn.GRU(64, 64)
    big = torch.nn.LSTM(256, 256, num_layers=2, bidirectional=True)
    cell = torch.nn.LSTMCell(16, 16)
    h64 = torch.zeros(1, 1, 64)
    h_big = torch.zeros(4, 1, 256)
    h16 = torch.zeros(1, 16)
    return [
        # (case, function name, args builder (device -> args), calls per timing)
        ("LSTM(64) 1 step, batch 1 (streaming)", "lstm",
         lambda d: (torch.randn(1, 1, 64, device=d), [h64.to(d), h64.to(d)],
                    [w.to(d) for w in lstm64._flat_weights], True, 1, 0.0, False, False, False), 50),
        ("GRU(64) 1 step, batch 1 (streaming)", "gru",
         lambda d: (torch.randn(1, 1, 64, device=d), h64.to(d),
                    [w.to(d) for w in gru64._flat_weights], True, 1, 0.0, False, False, False), 50),
        ("LSTMCell(16) batch 1 (silero-vad size)", "lstm_cell",
         lambda d: (torch.randn(1, 16, device=d), [h16.to(d), h16.to(d)],
                    *(w.to(d) for w in (cell.weight_ih, cell.weight_hh, cell.bias_ih, cell.bias_hh))), 50),
        (f"LSTM(256) 2 layers bidirectional, {steps} steps", "lstm",
         lambda d: (torch.randn(steps, 1, 256, device=d), [h_big.to(d), h_big.to(d)],
                    [w.to(d) for w in big._flat_weights], True, 2, 0.0, False, True, False), 2),
    ]


def main():
    args = timing.arg_parser(__doc__.splitlines()[0]).parse_args()
    torch.set_num_threads(1)
    dev = emulation.install()
    dmlshim.activate(fallback="known", trace=0)
    rows = []
    cases = _cases(args.quick)
    python = _python_route({name for _, name, _, _ in cases})
    with torch.no_grad():
        for case, name, build, number in cases:
            wrapper = getattr(python, name)
            now = getattr(torch._VF, name)
            dev_args, cpu_args = build(dev), build("cpu")
            for fn in (wrapper, now):                                    # fill the weight cache
                fn(*dev_args)
            ops = {r["op"] for r in dmlshim.report().rows}
            assert f"_VF.{name}" in ops and any(op.startswith(f"aten::{name}") for op in ops), ops
            timings = timing.measure({
                "python wrapper": lambda: wrapper(*dev_args),
                "aten kernel": lambda: now(*dev_args),
                "cpu": lambda: now(*cpu_args),
            }, repeats=5 if args.quick else 15, number=number)
            rows += timing.rows(case, timings, baseline="python wrapper")
    dmlshim.deactivate()
    timing.finish(args, "rnn_routes", rows, extra={"torch": torch.__version__,
                                                   "device": str(dev), "grad": "no_grad"})


if __name__ == "__main__":
    main()
