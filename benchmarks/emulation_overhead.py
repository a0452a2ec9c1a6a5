"""What the emulated DirectML device costs per op, against plain CPU tensors.

Every op on ``privateuseone:0`` goes through a Python kernel (routing, rules,
zero-copy CPU aliases) and then the same CPU kernel, so the difference between
the two variants is the emulator's per-call overhead. Cases: a 64-element add
(overhead-dominated), a 256x256 matmul (compute-dominated), and the transfers
and allocations the shim's CPU fallback relies on (``x.to(dev)``, ``.cpu()``,
``torch.empty(..., device=dev)``, ``copy_``; their CPU variant is the same-size
CPU copy). Variants are timed interleaved on one intra-op thread (the
overhead is per call; thread scheduling noise would hide it); times are µs
per call (min and median over repeats).

The device is bound to torch one of two ways (``dmlshim.emulation.binding()``):
torch's Python PrivateUse1 API (torch >= 2.5) or a compiled C++ extension (the
only way on torch 2.4.1). Where this torch has both, the script also runs itself
once more in a subprocess with the other binding, so both appear, each against
the CPU timed side by side in its own process.

Run: ``python benchmarks/emulation_overhead.py [--quick] [--json PATH] [--binding B]``.
"""
import json
import os
import subprocess
import sys
import tempfile

import torch

import timing

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), ".."))
from dmlshim import emulation  # noqa: E402


def cases(dev):
    """``{case: (cpu fn, emulated fn, calls per sample)}``."""
    a, b = torch.randn(64), torch.randn(64)
    ad, bd = a.to(dev), b.to(dev)
    m, n = torch.randn(256, 256), torch.randn(256, 256)
    md, nd = m.to(dev), n.to(dev)
    host, dst_cpu, dst_dev = torch.randn(64), torch.empty(64), torch.empty(64, device=dev)
    return {
        "add, 64 elements": (lambda: a + b, lambda: ad + bd, 2000),
        "matmul, 256x256": (lambda: m @ n, lambda: md @ nd, 20),
        "torch.empty(64)": (lambda: torch.empty(64), lambda: torch.empty(64, device=dev), 2000),
        "x.to(device), 64 floats": (lambda: host.to(torch.float64),
                                    lambda: host.to(dev), 2000),
        "x.cpu(), 64 floats": (lambda: host.clone(), lambda: ad.cpu(), 2000),
        "copy_ host -> x, 64 floats": (lambda: dst_cpu.copy_(host),
                                       lambda: dst_dev.copy_(host), 2000),
    }


def measure_all(dev, binding, quick):
    rows, variant = [], f"emulated ({binding})"
    for case, (cpu_fn, dev_fn, number) in cases(dev).items():
        number = max(1, number // 10) if quick else number
        t = timing.measure({"cpu": cpu_fn, variant: dev_fn},
                           repeats=5 if quick else 15, number=number)
        added = (t[variant].median_s - t["cpu"].median_s) * 1e6
        note = f"{t['cpu'].median_s * 1e6:.2f} -> {t[variant].median_s * 1e6:.2f} us/call " \
               f"(added {added:+.2f} us)"
        rows += timing.rows(case, t, baseline="cpu", note=note)
    return rows


def other_binding_rows(binding, quick):
    """The same cases with the other binding, in a subprocess ([] where this torch lacks it)."""
    other = "compiled" if binding == "python" else "python"
    if other == "python" and not emulation._python_api.available():
        return []
    with tempfile.TemporaryDirectory() as tmp:
        out = os.path.join(tmp, "other.json")
        cmd = [sys.executable, __file__, "--binding", other, "--json", out] + \
            (["--quick"] if quick else [])
        subprocess.run(cmd, check=True, capture_output=True)
        with open(out, encoding="utf-8") as f:
            return json.load(f)["rows"]


def main():
    parser = timing.arg_parser(__doc__.splitlines()[0])
    parser.add_argument("--binding", choices=["python", "compiled"],
                        help="bind the device this way only (default: this torch's "
                             "default binding, plus the other where this torch has both)")
    args = parser.parse_args()
    if args.binding:
        os.environ["DMLSHIM_EMULATION_BINDING"] = args.binding
    torch.set_num_threads(1)
    dev = emulation.install()  # DirectML's default configuration
    rows = measure_all(dev, emulation.binding(), args.quick)
    if not args.binding:
        rows += other_binding_rows(emulation.binding(), args.quick)
    timing.finish(args, "emulation_overhead", rows,
                  extra={"torch": torch.__version__, "device": str(dev),
                         "binding": emulation.binding()})


if __name__ == "__main__":
    main()
