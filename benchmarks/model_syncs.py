"""Device-to-host syncs and dmlshim's added time, one row per reference model (issue 38).

    PYTHONPATH=. python benchmarks/model_syncs.py --json benchmarks/results/model_syncs-torch2.4.1.json
    PYTHONPATH=. python benchmarks/model_syncs.py --only sensevoice --repeat 1
    PYTHONPATH=. python benchmarks/model_syncs.py --quick      # make bench BENCH_ARGS=--quick

``--quick``: one timed run of each side, the tiny random-weight FunASR models only (``QUICK``:
not Whisper with its real weights nor GFPGAN + Real-ESRGAN, minutes each on a 2-core CPU).

Each model runs on the emulated DirectML device (random weights as examples/zoo.py builds
them, Whisper with the real tiny.en weights: examples/whisper_weights.py) once to warm up
with ``dmlshim.activate()``, then in the steady state:

* **device ops / CPU ops**: aten calls with a tensor on the device, counted by
  ``dmlshim.trace.counting()`` in a run of their own; CPU ops: the calls dmlshim ran on the
  CPU (``report()`` rows' ``cpu`` and ``island`` actions);
* **syncs**: device-to-host reads, the model's own code's and dmlshim's
  (``report().syncs``), with dmlshim's ops;
* **bytes moved**: what dmlshim copied host-to-device / device-to-host (``report()`` rows);
* **added µs per device op**: (median time with ``activate()`` on the emulated device as
  DirectML is − median time without dmlshim on an emulated device with none of DirectML's
  defects, ``emulation.configured(rules=[], has_float64_support=True)``) ÷ device ops.  It
  holds dmlshim's Python, the fixes' work (CPU islands included) and the emulator's rule
  checks, on this machine's CPU: an upper bound of what dmlshim adds, not a GPU figure.
  Where the defect-free run fails (no kernel at all: Whisper's sparse buffer), the baseline
  is the emulated DirectML as it is with only the fixes the model needs (below);
* **dmlshim's overhead µs per device op (trace)**: ``report().totals["overhead"]`` of the
  counted run ÷ device ops: dmlshim's Python, checks and host reads inside the calls it
  handled, without the ops' own device work and the work it does instead of DirectML
  (``substitute``, shown beside it: CPU islands, ops recomputed on the device), with the
  dispatcher Python kernels that passed calls through (``report().passed``).

With ``--device directml`` (under ``python -m dmlshim realdml run --``, docs/realdml.md) the
same models run on the real torch-directml 0.2.5 binary, and the baseline is the same model
without ``activate()`` on it, run in a child process (a raw run may end the process).  Where
the raw run fails, the baseline is ``activate()`` with only the fixes the model needs: the
defects whose fixes did anything but pass a call through in the model's run with every fix
(:func:`acted`, from ``report()``'s rows; a fix on an overload with several counts them all),
the others switched off as if the probes had not seen their defects.  Its time is then what
the rest of dmlshim adds (the unneeded fixes' kernels and wrappers, their watches), not
what the needed ones cost.  Lavapipe is a CPU, so only the ratio and the added µs per
device op mean something there (``model_syncs-realdml.json``).
"""
import argparse
import contextlib
import statistics
import sys
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE.parent / "examples"))
sys.path.insert(1, str(HERE))

import torchvision_ops  # noqa: E402  (this repo's CI only; no-op elsewhere)

torchvision_ops.apply()

import torch  # noqa: E402

import dmlshim  # noqa: E402
from dmlshim import emulation  # noqa: E402
import timing  # noqa: E402
import zoo  # noqa: E402

HEADER = ("model", "device ops", "CPU ops", "syncs: the model's", "syncs: dmlshim's",
          "bytes moved by dmlshim (h2d / d2h)", "added µs per device op",
          "dmlshim's overhead µs per device op (trace)")
RAW = "raw seconds: "        # the child's answer (--raw)
QUICK = ("SeACo-Paraformer (hotwords)", "SenseVoiceSmall", "Fun-ASR-Nano")   # --quick's models


def _whisper_real(cache):
    import funasr_models
    import funasr_transcribe
    import whisper_weights

    def setup(device):
        model = funasr_models.auto_model(whisper_weights.funasr_dir(), device, 1)
        return lambda: funasr_transcribe.run(model, zoo.AUDIO, None, "syncs", False)
    return setup


def _gfpgan_with_realesrgan(cache):
    import cv2
    import gfpgan_models

    image = cv2.imread(str(zoo.PHOTO), cv2.IMREAD_COLOR)

    def setup(device):
        background = gfpgan_models.background_upsampler(
            device, half=True, folder=gfpgan_models.build(cache / "gfpgan"), tile=128)
        restorer = gfpgan_models.restorer(gfpgan_models.build(cache / "gfpgan", arch="clean"), device,
                                          arch="clean", bg_upsampler=background)

        def run():
            torch.manual_seed(0)  # StyleGAN2's noise
            return restorer.enhance(image, paste_back=True)[2]
        return run
    return setup


def models(cache):
    funasr = cache / "funasr"
    return [
        ("SeACo-Paraformer (hotwords)", zoo._funasr("seaco", funasr, hotword="天气 公园")),
        ("SenseVoiceSmall", zoo._funasr("sensevoice", funasr)),
        ("Whisper tiny.en (real weights)", _whisper_real(cache)),
        ("Fun-ASR-Nano", zoo._funasr("nano", funasr)),
        ("GFPGAN v1.4 + Real-ESRGAN x2 background", _gfpgan_with_realesrgan(cache)),
    ]


def seconds(run, repeat):
    times = []
    for _ in range(repeat):
        start = time.perf_counter()
        with zoo.quiet():
            run()
        times.append(time.perf_counter() - start)
    return statistics.median(times)


def measure(name, setup, device, repeat, baseline):
    """One row: the counts of one steady-state run with ``activate()``, and the time added
    over ``baseline(setup, device, repeat, needed)``: ``(seconds, None)`` or ``(None, why
    not)``; ``needed`` the defects whose fixes acted (:func:`acted`)."""
    dmlshim.activate()
    try:
        dmlshim.trace.reset()
        with zoo.quiet():
            run = setup(device)
            run()                                     # warm-up: first-call caches, probes
        needed = needed_defects(acted(dmlshim.report()))
        dmlshim.trace.reset()
        shim = seconds(run, 1)
        report = dmlshim.report()
        shim = statistics.median([shim] + [seconds(run, 1) for _ in range(repeat - 1)])
        with dmlshim.trace.counting(device.type) as counter, zoo.quiet():
            run()
    finally:
        dmlshim.deactivate()
    base, note = baseline(setup, device, repeat, needed)
    rows = report.rows
    cpu_ops = sum(r["actions"].get("cpu", 0) + r["actions"].get("island", 0) for r in rows)
    syncs = {who: sum(c["reads"] for c in ops.values()) for who, ops in report.syncs.items()}
    ops = ", ".join(f"`{op}` {c['reads']}" for op, c in sorted(report.syncs["dmlshim"].items(),
                                                               key=lambda x: -x[1]["reads"]))
    added = (f"{(shim - base) / counter.device * 1e6:.1f} ({shim:.2f} s − {base:.2f} s, {shim / base:.2f}x"
             + (f"; {note})" if note else ")") if base is not None else f"{note}; {shim:.2f} s with dmlshim")
    totals = report.totals
    overhead = (f"{totals['overhead'] / counter.device * 1e6:.1f} (substitute "
                f"{totals['substitute'] / counter.device * 1e6:.1f})") if counter.device else ""
    return {"model": name, "device ops": counter.device, "CPU ops": cpu_ops,
            "syncs: the model's": syncs["model"],
            "syncs: dmlshim's": f"{syncs['dmlshim']}" + (f" ({ops})" if ops else ""),
            "bytes moved by dmlshim (h2d / d2h)": f"{timing_bytes(sum(r['h2d'] for r in rows))} / "
                                                  f"{timing_bytes(sum(r['d2h'] for r in rows))}",
            "added µs per device op": added,
            "dmlshim's overhead µs per device op (trace)": overhead}


def acted(report):
    """The fix names (registry patches, ``dispatcher:<gate>``, ``refused:<group>``) whose
    kernels or wrappers did anything but pass a call through in ``report``'s rows: an aten
    overload's row counts every fix on it, a wrapper's (``Tensor.__mul__``) every patch
    that wrapped that attribute."""
    from dmlshim.patches import REGISTRY, _select, dispatcher, refused
    by_op = {}
    for op, owners in _select.chains().items():
        for name in owners:
            if name == "refused":
                name = next(refused.fix_name(g) for g, ops in refused.GROUPS.items() if op in ops)
            by_op.setdefault(op.name(), set()).add(name)
    for op in (*dispatcher.FIXES, *dispatcher.ISLANDS):
        by_op.setdefault(op.name(), set()).add(dispatcher.gate(op))
    for patch in REGISTRY:
        patches = getattr(sys.modules.get(f"dmlshim.patches.{patch.name}"), "_patches", None)
        for parent, attr, *_ in getattr(patches, "_applied", ()):
            owner = getattr(parent, "__name__", "?").replace("torch.nn.functional", "F")
            by_op.setdefault(f"{owner}.{attr}", set()).add(patch.name)
    return {fix for row in report.rows if set(row["actions"]) - {"pass"}
            for fix in by_op.get(row["op"], ())}


def needed_defects(fixes):
    """The names of the defects whose fixes are among ``fixes``."""
    from dmlshim.probing import all_defects
    return sorted(d.name for d in all_defects() if set(d.fixes) & fixes)


@contextlib.contextmanager
def only_needed(needed):
    """Within: ``activate()`` switches on only the fixes of the defects ``needed``."""
    import dataclasses
    from dmlshim import probing
    allowed = {f for d in probing.all_defects() if d.name in needed for f in d.fixes}
    detect = probing.detect

    def narrowed(*args, **kwargs):
        found = detect(*args, **kwargs)
        return dataclasses.replace(found, fixes=None if found.fixes is None else found.fixes & allowed)
    probing.detect = narrowed
    try:
        yield
    finally:
        probing.detect = detect


def emulated_baseline(setup, device, repeat, needed):
    """The model on an emulated DirectML with none of its defects, without dmlshim; where
    that fails (no kernel at all: Whisper's sparse buffer), on the emulated DirectML as it is
    with only the fixes the model needs."""
    with emulation.configured(rules=[], has_float64_support=True):
        try:
            with zoo.quiet():
                bare = setup(device)
                bare()
            return seconds(bare, repeat), None
        except Exception as exc:  # noqa: BLE001
            why = f"{type(exc).__name__} without dmlshim ({zoo.first_error(exc)})"
    print(f"  no raw run ({why}); baseline: only the fixes of {', '.join(needed)}", file=sys.stderr)
    return (needed_seconds(setup, device, repeat, needed),
            f"baseline: activate() with only the fixes of {', '.join(needed)} (no raw run: {why})")


def needed_seconds(setup, device, repeat, needed):
    """Warm-up, then the median of ``repeat`` runs, with ``activate()`` switching on only the
    fixes of the defects ``needed`` (names)."""
    with only_needed(needed):
        dmlshim.activate()
        try:
            with zoo.quiet():
                run = setup(device)
                run()
            return seconds(run, repeat)
        finally:
            dmlshim.deactivate()


def raw_baseline(name):
    """The model on the real binary without dmlshim, in a child process (``--raw``); where
    that fails, with only the fixes it needs (``--needed``)."""
    def child(repeat, *extra):
        import subprocess
        command = [sys.executable, __file__, "--device", "directml", "--raw", "--repeat", str(repeat),
                   "--only", name, *extra]
        done = subprocess.run(command, capture_output=True, text=True)
        answer = [line for line in done.stdout.splitlines() if line.startswith(RAW)]
        if done.returncode == 0 and answer:
            return float(answer[-1][len(RAW):]), None
        why = (done.stderr.strip().splitlines() or [""])[-1][:160] if done.returncode > 0 else \
            f"the process ended (signal {-done.returncode})"
        return None, why

    def baseline(setup, device, repeat, needed):
        raw, why = child(repeat)
        if raw is not None:
            return raw, None
        print(f"  no raw run ({why}); baseline: only the fixes of {', '.join(needed)}", file=sys.stderr)
        base, why_not = child(repeat, "--needed", ",".join(needed))
        if base is None:
            return None, f"no raw run ({why}), nor with the needed fixes ({why_not})"
        return base, f"baseline: activate() with only the fixes of {', '.join(needed)} (no raw run: {why})"
    return baseline


def raw_seconds(setup, device, repeat, needed):
    """The child's work: warm-up, then the median of ``repeat`` runs, without dmlshim, or
    (``needed``: defect names) with only those defects' fixes."""
    if needed is not None:
        print(f"{RAW}{needed_seconds(setup, device, repeat, needed)}")
        return
    with zoo.quiet():
        run = setup(device)
        run()
    print(f"{RAW}{seconds(run, repeat)}")


def timing_bytes(n):
    return dmlshim.trace.human_bytes(n)


def main(argv=None):
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--only", nargs="+", metavar="WORD")
    p.add_argument("--json", type=Path, metavar="PATH")
    p.add_argument("--repeat", type=int, default=None, help="timed runs of each side (median; default 3, "
                                                            "1 with --quick)")
    p.add_argument("--quick", action="store_true",
                   help="one timed run of each side, the tiny FunASR models only (QUICK)")
    p.add_argument("--cache-dir", type=Path, default=None)
    p.add_argument("--device", choices=("emulated", "directml"), default="emulated",
                   help="the emulated device (default) or the real torch-directml (under realdml run)")
    p.add_argument("--raw", action="store_true", help="(the child process) time the model without dmlshim")
    p.add_argument("--needed", help="(the child process, with --raw) with only these defects' fixes, comma-separated")
    args = p.parse_args(argv)
    if args.repeat is None:
        args.repeat = 1 if args.quick else 3
    if args.device == "directml":
        import torch_directml
        device = torch_directml.device()
    else:
        device = emulation.install()
    dmlshim.activate()   # basicsr must first be imported with the shim active (gfpgan_restore.py)
    import gfpgan  # noqa: F401
    dmlshim.deactivate()
    import os
    cache = args.cache_dir or Path(os.environ.get("DMLSHIM_CACHE") or Path.home() / ".cache" / "dmlshim")
    chosen = [(n, s) for n, s in models(cache)
              if (not args.only or any(w.lower() in n.lower() for w in args.only))
              and (not args.quick or n in QUICK)]
    if args.raw:
        for name, setup in chosen:
            raw_seconds(setup, device, args.repeat, None if args.needed is None else args.needed.split(","))
        return 0
    threads = torch.get_num_threads()
    rows = []
    for name, setup in chosen:
        print(f"running {name} ...", file=sys.stderr)
        baseline = raw_baseline(name) if args.device == "directml" else emulated_baseline
        rows.append(measure(name, setup, device, args.repeat, baseline))
        torch.set_num_threads(threads)  # AutoModel sets its own
        print("  " + "\n  ".join(f"{k}: {v}" for k, v in rows[-1].items()), file=sys.stderr)
    if args.json:
        from dmlshim.patches import _gate
        timing.write_json(args.json, "model_syncs", rows,
                          {"torch": torch.__version__,
                           "device": "emulated DirectML" if args.device == "emulated"
                           else "torch-directml 0.2.5 on lavapipe",
                           "repeat": args.repeat,
                           "gate": _gate.report_line(_gate.report())})     # DMLSHIM_GATE=python: the Python gate
        print(f"wrote {args.json}", file=sys.stderr)
    return 0


if __name__ == "__main__":
    sys.exit(main())
