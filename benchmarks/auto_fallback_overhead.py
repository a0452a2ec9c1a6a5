"""What does catching *every* torch call cost?  (the mechanism behind fallback="auto")

``fallback="auto"`` must see every torch call so that an op the shim has never
heard of can be retried on the CPU when DirectML fails it. Candidates, each in
its minimal form (a pass-through that checks a "remembered ops" set and wraps
the call in try/except, exactly what auto needs on the happy path):

* ``mode``     a ``torch.overrides.TorchFunctionMode`` on this thread's mode stack
               (sees every Python-level torch call, however it was looked up; but
               the stack is per thread: worker threads need their own push);
* ``mode/enter`` the same mode entered and left around each call (what a lazy
               per-thread entry at ``Module.__call__`` pays once per forward);
* ``wrapt``    ``wrapt.FunctionWrapper`` on every entry point (torch.*,
               torch.Tensor.*, torch.nn.functional.*, torch._C._nn.*): global,
               all threads, but blind to references taken before activation
               (``from torch import cat``) and to torch._VF / torch.ops;
* ``closure``  the same entry points with plain Python closures (no wrapt);
* ``dmlshim.auto`` the shipped patch (closures + remembered-failure check).

Also prints how long installing each costs.  On the emulated device the op
itself costs ~10-40 µs, so the ratios there show a realistic share.
"""
import functools
import os
import sys
import time
import types
from pathlib import Path

import torch
import torch.nn.functional as F
import wrapt
from torch.overrides import TorchFunctionMode

import timing

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

_CATCH = (RuntimeError, NotImplementedError, UnicodeDecodeError)
_remembered = set()          # ops sent straight to the CPU (empty on the happy path)


def _on_error(func, exc):    # never reached in these timings
    raise exc


class PassMode(TorchFunctionMode):
    def __torch_function__(self, func, types_, args=(), kwargs=None):
        if func in _remembered:
            raise AssertionError
        try:
            return func(*args, **(kwargs or {}))
        except _CATCH as exc:
            return _on_error(func, exc)


def _wrapt_wrapper(wrapped, instance, args, kwargs):
    if wrapped in _remembered:
        raise AssertionError
    try:
        return wrapped(*args, **kwargs)
    except _CATCH as exc:
        return _on_error(wrapped, exc)


def _closure(func):
    @functools.wraps(func)
    def wrapper(*args, **kwargs):
        if func in _remembered:
            raise AssertionError
        try:
            return func(*args, **kwargs)
        except _CATCH as exc:
            return _on_error(func, exc)
    return wrapper


# Tensor attributes that must never be wrapped (object protocol, dispatch hooks).
_SKIP = {"__init__", "__new__", "__repr__", "__getattribute__", "__getattr__", "__setattr__",
         "__delattr__", "__class__", "__torch_function__", "__torch_dispatch__", "__reduce_ex__",
         "__reduce__", "__init_subclass__", "__subclasshook__", "__dir__", "__sizeof__",
         "__setstate__", "__deepcopy__", "__hash__", "__eq__", "__format__", "__len__", "__iter__",
         "__bool__", "__index__", "__int__", "__float__", "__dlpack__", "__dlpack_device__",
         "__array__", "__array_wrap__", "__contains__", "__get__", "__instancecheck__",
         "_make_subclass", "_make_wrapper_subclass", "__reversed__", "__array_priority__",
         "__torch_function_mode__", "__weakref__", "__dict__", "__doc__", "__module__",
         "__slots__", "as_subclass", "__cuda_array_interface__", "data_ptr", "dim", "size",
         "is_floating_point", "numel", "element_size", "storage_offset", "stride", "__ne__"}


def entry_points():
    """(owner, name) of every public callable a catch-all wrapper would cover."""
    out = []
    for owner in (torch, F, torch._C._nn, torch._C._linalg, torch._C._fft, torch._C._special):
        for name, obj in list(vars(owner).items()):
            if name.startswith("__") or not callable(obj) or isinstance(obj, type):
                continue
            if isinstance(obj, (types.BuiltinFunctionType, types.FunctionType)):
                if owner is torch and isinstance(obj, types.FunctionType) and \
                        not getattr(obj, "__module__", "").startswith("torch.functional"):
                    continue                         # torch.* python helpers (compile, load...)
                out.append((owner, name))
    for name in dir(torch.Tensor):
        if name in _SKIP or name.startswith("_") and not (name.startswith("__") and name.endswith("__")):
            continue
        obj = getattr(torch.Tensor, name, None)
        kinds = (types.MethodDescriptorType, types.WrapperDescriptorType, types.FunctionType)
        if isinstance(obj, kinds):
            out.append((torch.Tensor, name))
    return out


class Installer:
    """Install/uninstall one wrapping strategy over all entry points."""

    def __init__(self, make):
        self.make, self.saved = make, []

    def install(self):
        for owner, name in ENTRY_POINTS:
            had_own = name in vars(owner)
            old = vars(owner)[name] if had_own else getattr(owner, name)
            if isinstance(old, staticmethod):
                continue
            try:
                setattr(owner, name, self.make(getattr(owner, name)))
            except (AttributeError, TypeError):
                continue
            self.saved.append((owner, name, old, had_own))

    def uninstall(self):
        for owner, name, old, had_own in reversed(self.saved):
            if had_own:
                setattr(owner, name, old)
            else:
                delattr(owner, name)
        self.saved.clear()


ENTRY_POINTS = entry_points()
MODE = PassMode()


def make_strategies():
    from dmlshim.patches import auto          # the real thing: dmlshim/patches/auto.py alone
    from dmlshim.patches._wrap import Context

    wrapt_inst = Installer(lambda f: wrapt.FunctionWrapper(f, _wrapt_wrapper))
    closure_inst = Installer(_closure)
    return {
        "none": (lambda: None, lambda: None),
        "mode": (MODE.__enter__, lambda: MODE.__exit__(None, None, None)),
        "wrapt": (wrapt_inst.install, wrapt_inst.uninstall),
        "closure": (closure_inst.install, closure_inst.uninstall),
        "dmlshim.auto": (lambda: auto.install(Context()), auto.uninstall),
    }


def cases(device):
    n = 16
    a, b = torch.rand(n, device=device), torch.rand(n, device=device)
    x = torch.rand(8, 64, device=device)
    return {
        "torch.add(a, b)": lambda: torch.add(a, b),
        "a.add(b)": lambda: a.add(b),
        "a + b": lambda: a + b,
        "F.relu(a)": lambda: F.relu(a),
        "torch.cat([a, b])": lambda: torch.cat([a, b]),
        "x.shape, x.device (reads)": lambda: (x.shape, x.device),
    }


def main():
    args = timing.arg_parser(__doc__.splitlines()[0]).parse_args()
    repeats, number = (5, 200) if args.quick else (15, 2000)
    strategies = make_strategies()
    all_rows, extra = [], {"entry_points": len(ENTRY_POINTS)}

    # Installation cost (wrapping every entry point, then unwrapping).
    for name, (on, off) in strategies.items():
        t0 = time.perf_counter()
        on()
        t1 = time.perf_counter()
        off()
        extra[f"install_s[{name}]"] = t1 - t0
        extra[f"uninstall_s[{name}]"] = time.perf_counter() - t1

    state = {"current": "none"}

    def switch(name):
        if state["current"] != name:
            strategies[state["current"]][1]()
            strategies[name][0]()
            state["current"] = name

    torch.set_grad_enabled(False)
    torch.set_num_threads(1)         # a shared 2-core box: keep intra-op threads out of it
    # CPU first: installing the emulated device makes CPU timings bimodal.  Without a device,
    # activate() installs nothing (the no-device policy): DMLSHIM_PROBE=off installs every
    # patch, as on a DirectML machine running CPU work.
    previous = os.environ.get("DMLSHIM_PROBE")
    os.environ["DMLSHIM_PROBE"] = "off"
    try:
        all_rows += model_rows(repeats, 20)
    finally:
        if previous is None:
            del os.environ["DMLSHIM_PROBE"]
        else:
            os.environ["DMLSHIM_PROBE"] = previous
    for device in ("cpu", "emulated"):
        if device == "emulated":
            try:
                from dmlshim import emulation
                device = emulation.install()
            except Exception as exc:                # emulator not available: CPU only
                extra["emulated"] = f"skipped: {exc!r}"
                break
        for case, fn in cases(device).items():
            funcs = {name: _repeat(fn, number) for name in strategies}
            funcs["mode/enter"] = _enter_each(fn, number)
            setup = {name: functools.partial(switch, name) for name in strategies}
            setup["mode/enter"] = functools.partial(switch, "none")
            t = timing.measure(funcs, repeats=repeats, warmup=1, setup=setup)
            switch("none")
            t = {k: timing.Timing(v.min_s / number, v.median_s / number, v.repeats) for k, v in t.items()}
            all_rows += timing.rows(f"{case} [{torch.device(device).type}]", t, baseline="none")
    for name, s in extra.items():
        if name.startswith(("install", "uninstall")):
            print(f"{name}: {timing.seconds(s)}")
    print(f"entry points wrapped by wrapt/closure: {len(ENTRY_POINTS)}")
    timing.finish(args, "auto_fallback_overhead", all_rows, extra)


def model_rows(repeats, number):
    """A whole forward pass with dmlshim.activate(fallback="known") vs "auto", on CPU
    tensors: every torch call pays the pass-through and nothing else happens, so
    the difference is the catch-all's cost per forward. TransformerEncoderLayer in
    train mode (dropout 0) takes the op-by-op path, not the fused fast path."""
    import dmlshim

    torch.manual_seed(0)
    layer = torch.nn.TransformerEncoderLayer(64, 4, 128, dropout=0.0, batch_first=True).train()
    x = torch.rand(1, 50, 64)
    calls = _count_calls(lambda: layer(x))

    def run():
        for _ in range(number):
            layer(x)

    def use(mode):
        def setup():
            current = dmlshim.settings()
            if (current.fallback if current else None) != mode:
                dmlshim.deactivate()
                if mode:
                    dmlshim.activate(fallback=mode)
                run()                                   # warm caches after switching
        return setup

    t = timing.measure({"inactive": run, "known": run, "auto": run}, repeats=repeats, warmup=1,
                       setup={"inactive": use(None), "known": use("known"), "auto": use("auto")})
    dmlshim.deactivate()
    t = {k: timing.Timing(v.min_s / number, v.median_s / number, v.repeats) for k, v in t.items()}
    added = t["auto"].min_s - t["known"].min_s
    per_call = f"auto adds {added / calls * 1e9:.0f} ns/call (min)" if calls else \
        f"auto adds {added * 1e6:.1f} us/forward (min)"
    return timing.rows("TransformerEncoderLayer(64) forward [cpu]", t, baseline="known",
                       note=f"{calls} torch calls/forward; {per_call}")


def _count_calls(fn):
    """How many dmlshim.auto wrappers one ``fn()`` goes through (nested ones too): counted
    with ``DMLSHIM_GATE=python``, since the compiled gate's fronts run a call of plain CPU
    values in C, never entering the Python wrapper (``dmlshim/patches/_wrap.py fronted``)."""
    import dmlshim
    from dmlshim.patches import auto

    count = [0]

    def profile(frame, event, arg):
        if event == "call" and frame.f_code is code:
            count[0] += 1

    previous = os.environ.get("DMLSHIM_GATE")
    os.environ["DMLSHIM_GATE"] = "python"
    try:
        dmlshim.activate(fallback="auto")
        # made while active (a wrapper is made for activate()'s context): shared by every wrapper
        code = auto._make_wrapper("probe", len, set()).__code__
        sys.setprofile(profile)
        try:
            fn()
        finally:
            sys.setprofile(None)
            dmlshim.deactivate()
    finally:
        if previous is None:
            del os.environ["DMLSHIM_GATE"]
        else:
            os.environ["DMLSHIM_GATE"] = previous
    return count[0]


def _repeat(fn, number):
    def run():
        for _ in range(number):
            fn()
    return run


def _enter_each(fn, number):
    def run():
        for _ in range(number):
            with MODE:
                fn()
    return run


if __name__ == "__main__":
    main()
