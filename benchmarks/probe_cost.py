"""What probing costs and what it saves: ``activate()`` cold and warm, FunASR on the CPU.

1. FunASR SeacoParaformer (examples/funasr_models.py, random weights) on the CPU, with
   no DirectML device present, timed interleaved (benchmarks/timing.py):
   ``cpu`` (dmlshim inactive), ``cpu+shim`` (``activate()``, probing ``auto``: no device,
   so no fix is installed) and ``cpu+shim probe=off`` (every fix installed, as before
   issue 18).  Ratios are to ``cpu``.  The same three for one CPU ``torch.mul``.
2. ``activate()`` + ``deactivate()`` on the emulated device: ``cold`` (probes run and the
   verdicts are written to an empty cache: the emulated device seen as a real adapter),
   ``warm`` (the verdicts read back), ``emulated`` (the emulator's in-process reuse),
   ``off`` (``DMLSHIM_PROBE=off``, no probing); then ``probing.detect()`` alone.
3. The first ``activate()`` of a fresh process (one subprocess per sample), probing
   ``auto`` and ``off``: what a user's script pays once.

``--quick`` (make bench's CI form): the tiny model, one timed round of each case.
"""
import os
import sys
import tempfile
import time
from pathlib import Path

import torch

import timing

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "examples"))
sys.path.insert(0, str(ROOT / "benchmarks"))


def _activate_with(probe):
    """A timing setup: dmlshim active with DMLSHIM_PROBE=probe (None: unset)."""
    def setup():
        import dmlshim
        dmlshim.deactivate()
        _probe_env(probe)()
        dmlshim.activate()
    return setup


def _probe_env(value):
    def set_():
        if value is None:
            os.environ.pop("DMLSHIM_PROBE", None)
        else:
            os.environ["DMLSHIM_PROBE"] = value
    return set_


def funasr_rows(size, repeats, ncpu):
    import dmlshim
    from funasr_bench import clips
    from funasr_models import auto_model, build

    model = auto_model(build("seaco", size=size), "cpu", ncpu)
    audio = clips((5,))["5s"]
    run = lambda: model.generate(audio)                               # noqa: E731

    timings = timing.measure({"cpu": run, "cpu+shim": run, "cpu+shim probe=off": run},
                             setup={"cpu": dmlshim.deactivate, "cpu+shim": _activate_with(None),
                                    "cpu+shim probe=off": _activate_with("off")},
                             repeats=repeats, warmup=1)
    dmlshim.deactivate()
    _probe_env(None)()
    return timing.rows(f"FunASR {size} 5 s, CPU, no device", timings, baseline="cpu")


def mul_rows(repeats):
    """A CPU ``torch.mul`` of 64 floats, no device present: the dispatcher net's price."""
    import dmlshim

    x, y = torch.rand(64), torch.rand(64)
    run = lambda: torch.mul(x, y)                                     # noqa: E731

    timings = timing.measure({"cpu": run, "cpu+shim": run, "cpu+shim probe=off": run},
                             setup={"cpu": dmlshim.deactivate, "cpu+shim": _activate_with(None),
                                    "cpu+shim probe=off": _activate_with("off")},
                             repeats=repeats, warmup=2, number=2000)
    dmlshim.deactivate()
    _probe_env(None)()
    return timing.rows("torch.mul f32[64], CPU, no device", timings, baseline="cpu")


def activate_rows(repeats):
    import dmlshim
    from dmlshim import emulation, probing

    device = emulation.install()
    cache = tempfile.mkdtemp(prefix="dmlshim-probe-cache-")
    real, real_dir = probing.target_device, probing.cache_dir

    def as_real(cold):
        def setup():
            dmlshim.deactivate()
            _probe_env(None)()
            probing.target_device = lambda target: (device, "benchmark adapter", False)
            probing.cache_dir = lambda: cache
            if cold:
                for f in os.listdir(cache):
                    os.remove(os.path.join(cache, f))
        return setup

    def plain(probe):
        def setup():
            dmlshim.deactivate()
            probing.target_device = real
            _probe_env(probe)()
        return setup

    def once():
        dmlshim.activate(fallback="auto")
        dmlshim.deactivate()

    def detect(cold):
        def run():
            if cold:
                probing._memo.clear()
            probing.detect("privateuseone", "auto")
        return run

    timings = timing.measure({"cold": once, "warm": once, "emulated": once, "off": once},
                             setup={"cold": as_real(True), "warm": as_real(False),
                                    "emulated": plain(None), "off": plain("off")},
                             repeats=repeats, warmup=1)
    rows = timing.rows("activate()+deactivate(), emulated device", timings, baseline="off")
    # the probing alone: every probe run (cache written), the cache read back
    timings = timing.measure({"probes + cache write": detect(False), "cache read": detect(False),
                              "emulated, probes": detect(True), "emulated, reused": detect(False)},
                             setup={"probes + cache write": as_real(True), "cache read": as_real(False),
                                    "emulated, probes": plain(None), "emulated, reused": plain(None)},
                             repeats=repeats, warmup=1)
    probing.target_device, probing.cache_dir = real, real_dir
    _probe_env(None)()
    return rows + timing.rows("probing.detect(), emulated device", timings)


# One fresh process: the emulated device installed, then the first activate() timed. The
# first call pays one-off costs the in-process rows' warm-up hides (lazy imports in torch).
_FIRST = ("import time, dmlshim; from dmlshim import emulation; emulation.install(); "
          "t = time.perf_counter(); dmlshim.activate(); print(time.perf_counter() - t)")


def first_activate_rows(repeats):
    """The first ``activate()`` of a process, interleaved: probing ``auto`` and ``off``."""
    import subprocess

    variants = {"probe auto": None, "probe off": "off"}
    samples = {name: [] for name in variants}
    for _ in range(repeats):
        for name, probe in variants.items():
            env = dict(os.environ)
            env.pop("DMLSHIM_PROBE", None)
            env.update({"DMLSHIM_PROBE": probe} if probe else {})
            out = subprocess.run([sys.executable, "-c", _FIRST], env=env, capture_output=True,
                                 text=True, check=True, timeout=600).stdout
            samples[name].append(float(out.split()[-1]))
    timings = {name: timing.Timing.of(s) for name, s in samples.items()}
    return timing.rows("first activate() in a fresh process, emulated device", timings,
                       baseline="probe off")


def main():
    parser = timing.arg_parser(__doc__.splitlines()[0])
    parser.add_argument("--repeats", type=int, default=7)
    parser.add_argument("--size", choices=("real", "tiny"), default="real")
    parser.add_argument("--threads", type=int, default=torch.get_num_threads())
    args = parser.parse_args()
    repeats = 1 if args.quick else args.repeats
    rounds = repeats if args.quick else repeats * 3        # of the cheaper cases
    start = time.perf_counter()
    rows = funasr_rows("tiny" if args.quick else args.size, repeats, args.threads)
    rows += mul_rows(rounds)
    print(timing.format_table(rows), flush=True)
    rows += activate_rows(rounds)
    rows += first_activate_rows(repeats)
    timing.finish(args, "probe_cost", rows, {"threads": args.threads, "torch": torch.__version__,
                                             "seconds": time.perf_counter() - start})


if __name__ == "__main__":
    main()
