"""The ``out=`` sweep: what the real binary does with an ``out=`` tensor of the wrong size.

For every OpInfo that supports ``out=`` (float32, its first sample, where its results are
non-empty tensors of a dtype DirectML holds: not complex), the op runs on the device twice: into empty ``out`` tensors, and into
non-empty ones of the wrong size (``numel + 3`` elements).  Each run gets a verdict:
``right`` (the CPU's shape and values), ``unresized`` (no error; ``out`` kept its shape),
``refused`` ("The size of tensor a ... must match": the kernel saw the wrong size),
``wrong_values``, ``error`` (any other exception: a defect of the op itself, not of
``out=``), or ``abort`` (the process died: the sweep goes on in a new child after that op).
Raw, this is failure_modes.md #65; with ``--shim`` (``dmlshim.activate()``) every run
should be ``right`` or the CPU's own error.

The ops whose empty or wrong-size ``out`` is ``unresized``, ``refused`` or ``abort`` raw
are written to ``dmlshim/data/dml_out_unresized_torch241.txt`` (``--write-ops``),
the emulator's rule for #65 (``emulation.rules``).

Usage (the torch 2.4.1 + torch-directml venv, the stack built; ~6 minutes)::

    python -m dmlshim realdml run -- python benchmarks/out_sweep.py [--shim] [--write-ops]
        [--out benchmarks/results/out-sweep-realdml-raw.json]

Docs: docs/defects.md (``out_resize``).
"""
from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import warnings
from collections import Counter
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
OPS_FILE = ROOT / "dmlshim" / "data" / "dml_out_unresized_torch241.txt"
DEFECTIVE = ("unresized", "refused", "abort")
# results whose values are uninitialised memory: their shape is compared, not their values
UNINITIALIZED = {"empty", "empty_like", "empty_strided", "empty_permuted"}
# results DirectML cannot hold: a device tensor of these dtypes aborts the process
# (failure_modes.md #8, #9; dmlshim.islands), whatever out= does
NEVER_HELD = {"torch.complex64", "torch.complex128", "torch.complex32", "torch.bfloat16"}


def _verdict(outs, expected, values=True) -> str:
    import torch
    for o, t in zip(outs, expected):
        if o.shape != t.shape:
            return "unresized"
        if values and not torch.allclose(o.cpu().double(), t.double(), atol=1e-3, rtol=1e-3, equal_nan=True):
            return "wrong_values"
    return "right"


def _run(op, sample, expected, device, case) -> str:
    import torch
    from torch.utils._pytree import tree_map

    def dev(t):
        return t.to(device) if isinstance(t, torch.Tensor) else t
    outs = tuple(torch.empty(0 if case == "empty" else t.numel() + 3, dtype=t.dtype, device=device)
                 for t in expected)
    kwargs = tree_map(dev, sample.kwargs)
    if "device" in kwargs:                                      # a factory: made on the device
        kwargs["device"] = device
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            op(tree_map(dev, sample.input), *tree_map(dev, sample.args), **kwargs,
               out=outs if len(outs) > 1 else outs[0])
    except Exception as exc:                      # noqa: BLE001 - every failure is a verdict
        return "refused" if "must match the size of tensor" in str(exc) else "error"
    return _verdict(outs, expected, values=getattr(op, "__name__", "") not in UNINITIALIZED)


def child(progress: Path, shim: bool) -> None:
    """Sweep in this process, appending one JSON line per op to ``progress``; ops already
    there are skipped (a parent restarts a child that aborted)."""
    import torch
    import torch_directml
    from torch.testing._internal.common_methods_invocations import op_db
    device = torch_directml.device()
    current = {}                  # OpInfo keeps the functions of its import: call today's
    if shim:
        import dmlshim
        from dmlshim.patches import _wrap, out_resize
        dmlshim.activate()
        current = {id(_wrap.original(ns, name)): getattr(ns, name) for ns, name in out_resize.functions()}
    done = {json.loads(line)["op"] for line in progress.read_text().splitlines()}
    for info in op_db:
        key = info.name + (f".{info.variant_test_name}" if info.variant_test_name else "")
        if not info.supports_out or key in done or torch.float32 not in info.supported_dtypes("cpu"):
            continue
        try:
            sample = next(iter(info.sample_inputs("cpu", torch.float32)))
            result = info(sample.input, *sample.args, **sample.kwargs)
        except Exception:                                       # noqa: BLE001 - no CPU answer
            continue
        expected = result if isinstance(result, tuple) else (result,)
        if not all(isinstance(t, torch.Tensor) and t.numel() and str(t.dtype) not in NEVER_HELD
                   for t in expected):
            continue
        row = {"op": key, "aten": info.aten_name, "empty": "abort", "wrong": "abort"}
        with progress.open("a") as f:                           # an abort leaves this line
            f.write(json.dumps(row) + "\n")
        op = current.get(id(info.op), info.op)
        row.update({case: _run(op, sample, expected, device, case) for case in ("empty", "wrong")})
        lines = progress.read_text().splitlines()[:-1] + [json.dumps(row)]
        progress.write_text("\n".join(lines) + "\n")


def sweep(shim: bool) -> list:
    with tempfile.TemporaryDirectory() as tmp:
        progress = Path(tmp) / "progress.jsonl"
        progress.write_text("")
        for _ in range(100):                                    # one new child per abort
            args = [sys.executable, __file__, "--child", str(progress)] + (["--shim"] if shim else [])
            if subprocess.run(args, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL).returncode == 0:
                break
        return [json.loads(line) for line in progress.read_text().splitlines()]


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--shim", action="store_true", help="with dmlshim.activate()")
    parser.add_argument("--out", help="results JSON (default: benchmarks/results/out-sweep-realdml-"
                                      "{raw,shim}.json)")
    parser.add_argument("--write-ops", action="store_true", help=f"write {OPS_FILE.name} (raw only)")
    parser.add_argument("--child", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.child:
        child(Path(args.child), args.shim)
        return 0
    rows = sweep(args.shim)
    counts = {case: dict(Counter(r[case] for r in rows)) for case in ("empty", "wrong")}
    out = Path(args.out or ROOT / "benchmarks" / "results" /
               f"out-sweep-realdml-{'shim' if args.shim else 'raw'}.json")
    out.write_text(json.dumps({"shim": args.shim, "ops": len(rows), "counts": counts, "rows": rows},
                              indent=1) + "\n")
    print(json.dumps(counts))
    if args.write_ops and not args.shim:
        write_ops(rows)
    return 0


def write_ops(rows: list) -> None:
    """The emulator's list (:data:`OPS_FILE`): the aten names of the ops whose ``out=`` was
    ``unresized``, ``refused`` or ``abort`` in a raw sweep."""
    names = sorted({r["aten"].replace(".", "_") for r in rows
                    if r["empty"] in DEFECTIVE or r["wrong"] in DEFECTIVE})
    OPS_FILE.write_text("# aten ops whose out= kernel on the real torch-directml 0.2.5 binary does not\n"
                        "# resize an out= of the wrong size (benchmarks/out_sweep.py; failure_modes.md #65)\n"
                        + "".join(n + "\n" for n in names))


if __name__ == "__main__":
    os.environ.setdefault("PYTHONWARNINGS", "ignore")
    sys.exit(main())
