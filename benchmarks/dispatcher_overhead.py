"""What the dispatcher net costs (dmlshim/patches/dispatcher.py), and the mechanisms it beat.

1. The net as shipped: per call, a small (64-float) ``torch.mul`` on the CPU and on the
   emulated DirectML device, float x float and float x bool, ``x * 2.5`` (a wrapped
   number: the net's slower path), an unrelated op (``add``), ``torch.ldexp(bool, int)``
   (the C++ composite only the net fixes), and a SANM-like block forward (before/after
   adding the net to the ``mul`` patch).  Variants, interleaved: shim off; the
   wrapt ``mul`` patch alone; the net alone; both (what ``activate()`` installs).  The
   device rows "shim off" with a bool operand time the emulator's wrong (bool) result,
   which is slow; compare the fixed ones with the "hand fix" row.  Device rows include the
   emulator's own CPU mul (its kernels compute with CPU ops) passing the net a second
   time: on a real backend the net costs about the device row less the CPU row.
2. ``--candidates``: the mechanisms considered, each a minimal kernel for ``mul.Tensor``
   running the same fix (``mul.coerce_bool_operands``): the shipped BackendSelect
   kernel; (a) a kernel at ADInplaceOrView redispatching with
   ``_after_ADInplaceOrView_keyset``; (b) a ``TorchDispatchMode``; (c) a kernel at
   AutogradPrivateUse1 redispatching to AutogradOther (same autograd kernel).  The
   module docstring of dmlshim/patches/dispatcher.py holds the table.

Times are minimums of interleaved rounds (timing.py), 1 torch thread; "added" is the
variant's minimum minus shim off's.  The emulated device's own ops take 15-40 us with
large jitter, so its rows are noisier than the CPU's.

Run: ``python benchmarks/dispatcher_overhead.py [--quick] [--candidates] [--json PATH]``
(default JSON: ``benchmarks/results/dispatcher_overhead-torch<version>.json``).
"""
import os
import sys
import warnings

import torch

import timing

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), ".."))
import dmlshim  # noqa: E402
from dmlshim import emulation  # noqa: E402
from dmlshim.patches import Context, dispatcher, mul  # noqa: E402

_current = []          # the uninstall function of the variant installed now


def _variant(*installers):
    """An untimed setup: remove the previous variant, install these."""
    def setup():
        while _current:
            _current.pop()()
        for install in installers:
            _current.append(install())
    return setup


def _net(target="privateuseone"):
    dispatcher.install(Context(target=target))
    return dispatcher.uninstall


def _mul_patch(target="privateuseone"):
    """The mul patch: its BackendSelect fix (one layer since issue 49)."""
    mul.install(Context(target=target, fallback="known"))
    return mul.uninstall


def _cases(dev):
    g = torch.Generator().manual_seed(0)
    x, y, m, i = torch.randn(64, generator=g), torch.randn(64, generator=g), \
        torch.rand(64, generator=g) > 0.5, torch.randint(-3, 4, (64,), generator=g)
    xd, yd, md, id_ = (t.to(dev) for t in (x, y, m, i))
    return {
        "cpu: torch.mul(x, y)": lambda: torch.mul(x, y),
        "cpu: torch.mul(x, mask)": lambda: torch.mul(x, m),
        "cpu: x * 2.5": lambda: x * 2.5,
        "cpu: torch.add(x, y)": lambda: torch.add(x, y),
        "device: torch.mul(x, y)": lambda: torch.mul(xd, yd),
        "device: torch.mul(x, mask)": lambda: torch.mul(xd, md),
        "device: torch.mul(x, mask.float()) (hand fix)": lambda: torch.mul(xd, md.float()),
        "device: x * 2.5": lambda: xd * 2.5,
        "device: torch.add(x, y)": lambda: torch.add(xd, yd),
        "device: torch.ldexp(mask, i)": lambda: torch.ldexp(md, id_),
        # _to_copy, cat and index have net kernels too (CPU islands, empty inputs, CPU indices)
        "cpu: x.half()": lambda: x.half(),
        "cpu -> device: x.to(dev)": lambda: x.to(dev),
        "cpu: torch.cat([x, y])": lambda: torch.cat([x, y]),
        "device: torch.cat([x, y])": lambda: torch.cat([xd, yd]),
        # a COMPOSITES op: kernels at AutogradPrivateUse1 and, under inference_mode, PrivateUse1
        "device: torch.softmax(x, 0)": lambda: torch.softmax(xd, 0),
        "device: torch.softmax(x, 0) in inference_mode": lambda: _inference(torch.softmax, xd, 0),
    }


def _inference(fn, *args):
    with torch.inference_mode():
        return fn(*args)


def _time(cases, variants, quick, baseline="shim off"):
    rows = []
    for case, fn in cases.items():
        number = (100 if quick else 500) if case.startswith("device") else (500 if quick else 3000)
        if "block" in case:
            number //= 20
        t = timing.measure({v: fn for v in variants}, repeats=5 if quick else 15, number=number,
                           setup=variants)
        for row in timing.rows(case, t, baseline=baseline):
            added = (t[row["variant"]].min_s - t[baseline].min_s) * 1e6
            if row["variant"] != baseline:
                row["note"] = f"added {added:+.2f} us/call (min)"
            rows.append(row)
    _variant()()
    return rows


class Block(torch.nn.Module):
    """A FunASR SANM-like block: the bool mask multiply, a depthwise Conv1d, a gated
    feed-forward; four aten muls (float x bool twice, float x float, x * 0.5)."""

    def __init__(self, d=64):
        super().__init__()
        self.fsmn = torch.nn.Conv1d(d, d, 11, padding=5, groups=d, bias=False)
        self.w1, self.w2 = torch.nn.Linear(d, 2 * d), torch.nn.Linear(d, d)

    def forward(self, x, mask):                  # x [B, T, D] float, mask [B, T, 1] bool
        x = x * mask
        x = self.fsmn(x.transpose(1, 2)).transpose(1, 2) + x
        a, b = self.w1(x).chunk(2, -1)
        return self.w2(a * torch.sigmoid(b)) * mask * 0.5


def _block_cases(dev):
    torch.manual_seed(0)
    block = Block().eval()
    x, mask = torch.randn(1, 50, 64), torch.ones(1, 50, 1, dtype=torch.bool)
    block_d, xd, md = Block().eval().to(dev), x.to(dev), mask.to(dev)
    block_d.load_state_dict(block.state_dict())

    def run(model, *args):
        with torch.no_grad():
            return model(*args)
    return {"cpu: SANM-like block forward": lambda: run(block, x, mask),
            "device: SANM-like block forward": lambda: run(block_d, xd, md)}


def shipped(dev, quick):
    variants = {"shim off": _variant(), "mul patch": _variant(_mul_patch),
                "net": _variant(_net), "mul patch + net": _variant(_mul_patch, _net)}
    rows = _time(_cases(dev), variants, quick)
    # Without a fix the device block fails (conv1d gets the bool product): the mul patch
    # alone, and with the net beside it (what activate() installs).
    before_after = {v: variants[v] for v in ("mul patch", "mul patch + net")}
    return rows + _time(_block_cases(dev), before_after, quick, baseline="mul patch")


# ------------------------------------------------------------------ candidates

_aten_mul = torch.ops.aten.mul.Tensor


def _fix(op, keyset, args, kwargs):
    """The shipped fix's work (``mul.coerce_bool_operands``), returning the fixed call."""
    return mul.coerce_bool_operands(args, kwargs, False)
_PU1 = torch._C.DispatchKey.PrivateUse1


def _library_kernel(key, next_keyset):
    """(a)/(c): a Python kernel for mul.Tensor at ``key``, as dispatcher.py's but
    redispatching to ``next_keyset(keyset)``."""
    def kernel(keyset, *args, **kwargs):
        if keyset.has(_PU1):
            fixed = _fix(_aten_mul, keyset, args, kwargs)
            if fixed is not None:
                args, kwargs = fixed
        return _aten_mul.redispatch(next_keyset(keyset), *args, **kwargs)

    def install():
        library = torch.library.Library("aten", "IMPL")
        library.impl("mul.Tensor", kernel, key, with_keyset=True)
        return library._destroy
    return install


def _dispatch_mode():
    """(b): a TorchDispatchMode fixing mul.Tensor (every aten op passes through it)."""
    from torch.utils._python_dispatch import TorchDispatchMode

    class Mode(TorchDispatchMode):
        def __torch_dispatch__(self, func, types, args=(), kwargs=None):
            kwargs = kwargs or {}
            if func is _aten_mul and any(isinstance(a, torch.Tensor) and a.device.type == "privateuseone"
                                         for a in args):
                # no keyset here: the mul fix reads neither it nor the op
                args, kwargs = _fix(func, None, args, kwargs) or (args, kwargs)
            return func(*args, **kwargs)

    def install():
        mode = Mode()
        mode.__enter__()
        return lambda: mode.__exit__(None, None, None)
    return install


def candidates(dev, quick):
    DK = torch._C.DispatchKey
    after_adinplace = torch._C._after_ADInplaceOrView_keyset
    variants = {
        "shim off": _variant(),
        "BackendSelect (shipped)": _variant(_net),
        "(a) ADInplaceOrView": _variant(_library_kernel("ADInplaceOrView", lambda ks: ks & after_adinplace)),
        "(b) TorchDispatchMode": _variant(_dispatch_mode()),
        "(c) AutogradPrivateUse1": _variant(_library_kernel(     # same VariableType kernel
            "AutogradPrivateUse1", lambda ks: ks.remove(DK.AutogradPrivateUse1).add(DK.AutogradOther))),
    }
    cases = {k: v for k, v in _cases(dev).items() if "2.5" not in k and "ldexp" not in k}
    return [dict(row, case="candidates: " + row["case"]) for row in _time(cases, variants, quick)]


def main():
    parser = timing.arg_parser(__doc__.splitlines()[0])
    parser.add_argument("--candidates", action="store_true",
                        help="also time the mechanisms considered (the table in dispatcher.py)")
    args = parser.parse_args()
    timing.default_json(args, "dispatcher_overhead")
    torch.set_num_threads(1)
    warnings.simplefilter("ignore")     # (a) and (c) re-register kernels each round
    dmlshim.deactivate()
    dev = emulation.install()
    rows = shipped(dev, args.quick)
    if args.candidates:
        rows += candidates(dev, args.quick)
    timing.finish(args, "dispatcher_overhead", rows, timing.emulated_extra())


if __name__ == "__main__":
    main()
