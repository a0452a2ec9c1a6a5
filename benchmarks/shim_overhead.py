"""What dmlshim costs: wrapper pass-through per call, and the LSTM CPU fallback.

1. Pass-through: the same call with the shim off and on (interleaved), on CPU tensors
   (goal: <= 0.5 us added per call) and on target-device tensors that need no action
   (goal: <= 3 us).  The device is the emulated DirectML one (dmlshim.emulation).
   Variants: shim off; "core patches" (``fallback="off"``: the five core wrappers,
   which keep their fast path, without the auto-fallback catch-all); ``activate()``
   (defaults: core patches + ``fallback="auto"``).  Because the emulated device's own
   ops take 10-100 us with large jitter, the wrappers' cost on device tensors is also
   measured alone: each core wrapper (its real fast-path test) around a no-op.
2. LSTM at FunASR's size (input 512, hidden 512, bidirectional, batch 1, 750 steps)
   with tensors on the device, three ways:
   - ``shim``: dmlshim's rnn patch (CPU weights cached once);
   - ``module.cpu() per call``: the usual hand fix (module to CPU, run, module back);
   - ``plain CPU + transfers``: a CPU LSTM plus moving input and outputs (the floor).
   Goals: shim >= 3x faster than module.cpu() per call; <= 1.1x plain CPU + transfers.
   Also at 80 steps (~5 s of audio at Paraformer's 60 ms frames), where the weight
   copies weigh more against the LSTM's own compute.

With ``--device directml`` the same runs on the real torch-directml 0.2.5 (under
``python -m dmlshim realdml run --``, docs/realdml.md): lavapipe is a CPU, so only the ratios
mean something there, and its JSON is ``shim_overhead-realdml.json``.

Run: ``python benchmarks/shim_overhead.py [--quick] [--json PATH] [--threads N] [--device D]``
(the JSON goes to ``benchmarks/results/shim_overhead-torch<version>.json`` by default).
"""
import os
import sys

import torch
import torch.nn.functional as F

import timing

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), ".."))
import dmlshim  # noqa: E402
from dmlshim import emulation  # noqa: E402

def _switch(**settings):
    def setup():
        dmlshim.deactivate()
        if settings:
            dmlshim.activate(trace=0, **settings)
    return setup


# variant -> untimed setup before each of its turns.  "core patches" is
# fallback="off": the same five core wrappers (whose fast path is what is timed here)
# without the auto-fallback catch-all; "activate()" is the default (fallback="auto").
VARIANTS = {"shim off": _switch(), "core patches": _switch(fallback="off"),
            "activate()": _switch(fallback="auto")}


def pass_through(dev, quick):
    """Rows for calls that need no action, with the shim off and on."""
    a, b = torch.randn(64), torch.randn(64)
    ad, bd = a.to(dev), b.to(dev)
    id_ = torch.arange(64).to(dev)
    w = torch.randn(4, 4, 3)
    x, xd, wd = torch.randn(1, 4, 16), torch.randn(1, 4, 16).to(dev), w.to(dev)
    cases = {
        "cpu: a * b": lambda: a * b,
        "cpu: torch.mul(a, b)": lambda: torch.mul(a, b),
        "cpu: torch.cat([a, b])": lambda: torch.cat([a, b]),
        "cpu: F.conv1d": lambda: F.conv1d(x, w),
        "cpu: x.to(float32)": lambda: a.to(torch.float32),
        "device: a * b (checked, pass)": lambda: ad * bd,
        "device: torch.cat([a, b])": lambda: torch.cat([ad, bd]),
        "device: F.conv1d (float input)": lambda: F.conv1d(xd, wd),
        "device: x.to(float32)": lambda: ad.to(torch.float32),
        "device: x.clone()": lambda: ad.clone(),
        "device: x > 0": lambda: ad > 0,
        "device: int64 i + 1 (range checked)": lambda: id_ + 1,
        "cpu: x.contiguous()": lambda: a.contiguous(),
        "device: x.contiguous()": lambda: ad.contiguous(),
        "device: torch.arange(64)": lambda: torch.arange(64, device=dev),
        "device: int64 i[0] = 1": lambda: id_.__setitem__(0, 1),
    }
    number = 300 if quick else 2000
    rows = []
    for case, fn in cases.items():
        t = timing.measure({v: fn for v in VARIANTS}, repeats=5 if quick else 15, number=number,
                           setup=VARIANTS)
        for variant_rows in timing.rows(case, t, baseline="shim off"):
            v = variant_rows["variant"]
            if v != "shim off":
                added = (t[v].min_s - t["shim off"].min_s) * 1e6
                variant_rows["note"] = f"added {added:+.2f} us/call (min)"
            rows.append(variant_rows)
    dmlshim.deactivate()
    return rows


def decision_cost(dev, quick):
    """The wrappers' own cost on target-device tensors that need no action, free of the
    emulated device's noisy op times: each core patch's wrapper (its real ``select``)
    put around a no-op original, against the bare no-op."""
    from types import SimpleNamespace
    from dmlshim.patches import _wrap, dtypes

    ctx = _wrap.Context(target=dev.type)
    ad, bd = torch.randn(64).to(dev), torch.randn(64).to(dev)

    class Method:                            # a Tensor-method stand-in (plain-function wrapper)
        def op(self, *args, **kwargs):
            return None

    def noop(*args, **kwargs):
        return None

    # case: (owner, select, call with (owner, args)); mul and cat have no wrapper since issue 49
    # (their fixes sit at BackendSelect), dtypes' wrappers of a * b and x.to(float32) remain
    cases = {
        "device: a * b": (dtypes._complex_scalar_select(ctx), lambda f: f(ad, bd), True),
        "device: x.to(float32)": (dtypes._to_select(ctx), lambda f: f(ad, torch.float32), True),
    }
    rows = []
    number = 2000 if quick else 20000
    for case, (select, call, method) in cases.items():
        owner = type("Owner", (Method,), {}) if method else SimpleNamespace(op=noop)
        original = Method.op if method else noop
        _wrap.PatchSet("bench").intercept(ctx, owner, "op", lambda *a: None, op="x", select=select)
        bare, wrapped = (lambda: call(original)), (lambda: call(owner.op))
        t = timing.measure({"no-op original": bare, "wrapped no-op": wrapped},
                           repeats=5 if quick else 15, number=number)
        added = (t["wrapped no-op"].min_s - t["no-op original"].min_s) * 1e6
        rows += timing.rows(case + " [wrapper only]", t, baseline="no-op original",
                            note=f"wrapper adds {added:+.2f} us/call (min)")
    return rows


def lstm(dev, quick, steps):
    torch.manual_seed(0)
    cpu_lstm = torch.nn.LSTM(512, 512, bidirectional=True).eval()
    dev_lstm = torch.nn.LSTM(512, 512, bidirectional=True).eval()
    dev_lstm.load_state_dict(cpu_lstm.state_dict())
    dev_lstm.to(dev)
    x = torch.randn(steps, 1, 512)
    xd = x.to(dev)

    def shim():
        with torch.no_grad():
            out, (h, c) = dev_lstm(xd)
        return out

    def module_cpu_per_call():
        with torch.no_grad():
            dev_lstm.cpu()
            out, (h, c) = dev_lstm(xd.cpu())
            dev_lstm.to(dev)
            return out.to(dev), h.to(dev), c.to(dev)

    def plain_cpu_plus_transfers():
        with torch.no_grad():
            out, (h, c) = cpu_lstm(xd.cpu())
            return out.to(dev), h.to(dev), c.to(dev)

    with torch.no_grad():                 # the shim's answer equals the CPU's
        dmlshim.activate(trace=0)
        same = torch.equal(shim().cpu(), cpu_lstm(x)[0])
        dmlshim.deactivate()
    # The shim stays on for all three: deactivate() frees the weight cache, so switching
    # it per turn would time a cold cache every call; the other two variants only touch
    # CPU tensors or plain .to() calls, where the shim costs < 1 us.
    dmlshim.activate(trace=0)
    t = timing.measure(
        {"plain CPU + transfers": plain_cpu_plus_transfers, "shim (cached CPU weights)": shim,
         "module.cpu() per call": module_cpu_per_call},
        repeats=3 if quick else 9, warmup=1, number=3)   # 3 calls in a row: steady state
    dmlshim.deactivate()
    speedup = t["module.cpu() per call"].median_s / t["shim (cached CPU weights)"].median_s
    case = f"LSTM 512x512 bidir, batch 1, {steps} steps"
    note = f"shim {speedup:.1f}x faster than module.cpu(); output == CPU: {same}"
    return timing.rows(case, t, baseline="plain CPU + transfers", note=note)


def lstm_training(dev, quick, steps=80):
    """Forward + backward with gradients to the device parameters: the shim's cached
    CPU weights behind a custom autograd Function, against moving the weights with a
    differentiable ``.to("cpu")`` on every call (the other way to get gradients back),
    and a plain CPU LSTM."""
    torch.manual_seed(0)
    cpu_lstm = torch.nn.LSTM(512, 512, bidirectional=True)
    dev_lstm = torch.nn.LSTM(512, 512, bidirectional=True)
    dev_lstm.load_state_dict(cpu_lstm.state_dict())
    dev_lstm.to(dev)
    xd = torch.randn(steps, 1, 512).to(dev)
    vf_lstm = dmlshim.patches.original(torch._VF, "lstm")    # never the shim's wrapper

    def shim():
        dev_lstm.zero_grad()
        dev_lstm(xd)[0].sum().backward()

    def to_cpu_per_call():
        dev_lstm.zero_grad()
        weights = [w.to("cpu") for w in dev_lstm._flat_weights]
        h = torch.zeros(2, 1, 512)
        out = vf_lstm(xd.cpu(), (h, h), weights, True, 1, 0.0, True, True, False)[0]
        out.to(dev).sum().backward()

    def plain_cpu():
        cpu_lstm.zero_grad()
        cpu_lstm(xd.cpu())[0].to(dev).sum().backward()

    dmlshim.activate(trace=0)               # on for all: see lstm()
    t = timing.measure({"plain CPU + transfers": plain_cpu, "shim (cached CPU weights)": shim,
                        "weights .to('cpu') per call": to_cpu_per_call},
                       repeats=3 if quick else 9, warmup=1, number=3)
    dmlshim.deactivate()
    return timing.rows(f"LSTM training step (fwd+bwd), {steps} steps", t,
                       baseline="plain CPU + transfers")


def main():
    parser = timing.arg_parser(__doc__.splitlines()[0])
    parser.add_argument("--threads", type=int, default=1,
                        help="torch CPU threads (default 1: stable ratios on a shared machine)")
    parser.add_argument("--device", choices=("emulated", "directml"), default="emulated",
                        help="the emulated device (default) or the real torch-directml")
    args = parser.parse_args()
    torch.set_num_threads(args.threads)
    if args.device == "directml":
        import torch_directml
        dev = torch_directml.device()
        if args.json is None and not args.quick:
            args.json = timing.results_path("shim_overhead-realdml.json")
        extra = {**timing.emulated_extra(), "device": "torch-directml "
                 + _version("torch-directml") + " on the realdml stack (lavapipe, a CPU)"}
    else:
        timing.default_json(args, "shim_overhead")
        dev, extra = emulation.install(), timing.emulated_extra()
    rows = pass_through(dev, args.quick) + decision_cost(dev, args.quick)
    # 750 steps: FunASR's size (45 s of audio at Paraformer's 60 ms frames); 80 steps: ~5 s
    for steps in ((150, 40) if args.quick else (750, 80)):
        rows += lstm(dev, args.quick, steps)
    rows += lstm_training(dev, args.quick)
    timing.finish(args, "shim_overhead", rows, extra)


def _version(dist):
    from importlib.metadata import version
    return version(dist)


if __name__ == "__main__":
    main()
