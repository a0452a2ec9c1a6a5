"""Every model family on the emulated DirectML device, raw and with dmlshim: one table.

    python examples/zoo.py                        # print the table
    python examples/zoo.py --only sensevoice bicif
    python examples/zoo.py --json benchmarks/results/zoo-torch2.4.1.json   # docs/models.md's table

For each family the model (tiny random weights for FunASR, the published sizes for
GFPGAN; built offline with the libraries' own classes and loaders, see
funasr_models.py and gfpgan_models.py) runs three times on the same input:

1. on the CPU: the reference, timed;
2. on the emulated DirectML device *raw* (dmlshim inactive): the first error, or
   "silently wrong" when it runs but falls outside the parity profile. The emulator
   gets one rule beyond its defaults for this: DirectML's own device random stream
   (failure_modes.md #35, ``DIRECTML_RANDOM_STREAM``);
3. on the emulated device with ``dmlshim.activate()``: what the shim did (the actions
   of ``dmlshim.report()``), the parity figures against the CPU (``dmlshim.parity``;
   the ``exact`` profile unless ``DMLSHIM_EMULATION_NUMERICS=gpu``; ``device`` for GFPGAN
   v1.4, whose bilinear upsampling the shim computes with other kernels) and the time.

The emulated device computes with the CPU's kernels, so its times show the emulator's
and the shim's overhead, not a GPU's speed. "Raw" is about the device only: gfpgan is
imported once with dmlshim active (basicsr's import of a module torchvision removed
fails otherwise, on every device; see the README). ``--json PATH`` writes the table as a
results file (benchmarks/timing.py's schema: one row per family, keyed by ``HEADER``, with
the machine, date and torch version), from which docs/models.md is generated. Exit status
1 when a family falls outside the profile with the shim (a family that fails with the
shim too is shown, not counted).
"""
import argparse
import contextlib
import dataclasses
import logging
import os
import sys
import time
import traceback
from pathlib import Path
from typing import Callable

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))  # the model builders live next to this file
sys.path.insert(1, str(HERE.parent / "benchmarks"))  # timing.py: the results files' schema

import torchvision_ops  # noqa: E402  (this repo's CI only: see the module; no-op elsewhere)

torchvision_ops.apply()

import torch  # noqa: E402

import dmlshim  # noqa: E402
from dmlshim import emulation, parity  # noqa: E402
import timing  # noqa: E402

AUDIO = [HERE / "data" / "zh.wav", HERE / "data" / "en.wav"]
PHOTO = HERE / "data" / "astronaut.jpg"
HEADER = ("model", "raw on DirectML", "what dmlshim does", "parity with the CPU",
          "time: emulated / CPU", "device-to-host reads: the model's / dmlshim's")


@dataclasses.dataclass
class Family:
    """One model family.

    ``setup(device)`` loads the model on ``device`` and returns a zero-argument callable
    that runs it (the timed part); ``figures(actual, expected)`` returns
    ``(text, within_profile)`` for two results of that callable.
    """

    name: str
    setup: Callable
    figures: Callable


# ---------------------------------------------------------------- FunASR

def _transcripts(actual, expected, profile):
    """Worst file's transcript figures: ``(text, within)``; speaker labels must be equal."""
    rows = [(parity.compare_transcripts(a["text"], e["text"], a["timestamp"], e["timestamp"]),
             a.get("speakers") == e.get("speakers")) for a, e in zip(actual.values(), expected.values())]
    worst, speakers_equal = max(rows, key=lambda r: (not r[1], r[0].token_edits,
                                                     r[0].timestamp_max_ms))
    text = f"{worst}" + ("" if speakers_equal else "; speaker labels differ")
    ok = all(f.within(profile) and same for f, same in rows)
    return f"{len(rows)} files, worst: {text}", ok


def _funasr(kind, cache, hotword=None, **extra):
    """Setup for a FunASR kind through examples/funasr_transcribe.py's own functions."""
    import funasr_models
    import funasr_transcribe

    def setup(device):
        dirs = {k: str(funasr_models.build(k, cache_dir=cache)) for k in [kind, *extra.values()]}
        model = funasr_models.auto_model(dirs[kind], device, 1,
                                         **{arg: dirs[k] for arg, k in extra.items()})
        streaming = kind == "paraformer-streaming"
        return lambda: funasr_transcribe.run(model, AUDIO, hotword, "zoo", streaming)
    return setup


def funasr_families(cache, profile):
    figures = lambda a, e: _transcripts(a, e, profile)  # noqa: E731
    families = [
        Family("Paraformer (offline)", _funasr("paraformer", cache), figures),
        Family("BiCif-Paraformer (timestamps)", _funasr("bicif", cache), figures),
        Family("SeACo-Paraformer = paraformer-zh (hotwords)",
               _funasr("seaco", cache, hotword="天气 公园"), figures),
        Family("SenseVoiceSmall", _funasr("sensevoice", cache), figures),
        Family("Paraformer streaming (600 ms chunks, cache)",
               _funasr("paraformer-streaming", cache), figures),
        Family("fsmn-vad + paraformer-zh + ct-punc + cam++ speakers",
               _funasr("seaco", cache, vad_model="vad", punc_model="punc",
                       spk_model="campplus"), figures),
        Family("Whisper (funasr.models.whisper)", _funasr("whisper", cache), figures),
        Family("Fun-ASR-Nano (SenseVoice encoder + Qwen3, transformers)",
               _funasr("nano", cache), figures),
        Family("emotion2vec (utterance emotion scores)", _emotion2vec(cache),
               lambda a, e: _scores(a, e, profile)),
    ]
    return families


def _emotion2vec(cache):
    """emotion2vec through AutoModel: the 9 emotion scores of each file, (files, 9) float."""
    import funasr_models

    def setup(device):
        model = funasr_models.auto_model(funasr_models.build("emotion2vec", cache_dir=cache),
                                         device, 1)
        return lambda: torch.tensor([
            model.generate(str(path), granularity="utterance", extract_embedding=False)[0]["scores"]
            for path in AUDIO])
    return setup


def _scores(actual, expected, profile):
    figures = parity.compare(actual, expected, profile)
    return f"{len(expected)} files, scores: {figures}", figures.ok


# ---------------------------------------------------------------- GFPGAN

def _gfpgan(cache, arch):
    import cv2
    import gfpgan_models

    image = cv2.imread(str(PHOTO), cv2.IMREAD_COLOR)

    def setup(device):
        restorer = gfpgan_models.restorer(gfpgan_models.build(cache, arch=arch), device, arch=arch)

        def run():
            torch.manual_seed(0)  # StyleGAN2's noise
            return restorer.enhance(image, paste_back=True)[2]
        return run
    return setup


def _realesrgan(cache):
    import cv2
    import gfpgan_models

    image = cv2.imread(str(PHOTO), cv2.IMREAD_COLOR)

    def setup(device):
        upsampler = gfpgan_models.background_upsampler(
            device, half=True, folder=gfpgan_models.build(cache), tile=128)
        return lambda: upsampler.enhance(image, outscale=2)[0]
    return setup


def gfpgan_families(cache, profile):
    def judged_by(profile):
        def figures(actual, expected):
            f = parity.compare_images(actual, expected)
            return str(f), f.within(profile)
        return figures
    import gfpgan_models
    # GFPGANv1Clean upsamples bilinearly, which dmlshim computes with other kernels than the
    # CPU's (failure_modes.md #21): the device profile, the emulated device included
    families = [Family(f"GFPGAN {gfpgan_models.ARCH_LABELS[arch]} (detect, restore, paste back)",
                       _gfpgan(cache, arch),
                       judged_by(parity.PROFILES["device"] if arch == "clean" else profile))
                for arch in gfpgan_models.ARCHS]
    families.append(Family("Real-ESRGAN x2 background (float16, 128-pixel tiles, small RRDBNet)",
                           _realesrgan(cache), judged_by(profile)))
    return families


# ---------------------------------------------------------------- running

def _directml_random_stream(self, mean=0.0, std=1.0, *, generator=None):
    # torch-directml draws normal_ from the device's own random stream, seeded from the
    # CPU generator (failure_modes.md #35): same seed, other numbers than the CPU.
    seed = int(torch.randint(0, 2**62, ()))
    values = torch.empty(self.shape, dtype=self.dtype).normal_(
        mean, std, generator=torch.Generator().manual_seed(seed))
    return self.copy_(values)


# The emulator leaves #35 out by default (its device draws from the CPU generator); the
# zoo adds it, so a model that draws random numbers on the device shows what it does on
# DirectML (GFPGAN's StyleGAN2 noise).
DIRECTML_RANDOM_STREAM = emulation.Rule("normal_", replace=_directml_random_stream,
                                        source="failure_modes.md #35 (device RNG)")


def first_error(exc):
    """```Type: first sentence` (library file:line)`` of an exception, for one table cell."""
    frames = [f for f in traceback.extract_tb(exc.__traceback__)
              if "site-packages" in f.filename and "/torch/" not in f.filename]
    where = f" ({frames[-1].filename.split('site-packages/')[-1]}:{frames[-1].lineno})" if frames else ""
    first = (str(exc).strip().splitlines() or [""])[0].split(". ")[0][:120].replace("`", "'")
    return f"`{type(exc).__name__}: {first}`{where}"


def timed(family, device):
    """``(result, seconds)`` of one run of ``family`` on ``device`` (loading not timed)."""
    run = family.setup(device)
    start = time.perf_counter()
    result = run()
    return result, time.perf_counter() - start


def shim_actions():
    """``op action=n`` for every row of ``dmlshim.report()``, most calls first."""
    rows = sorted(dmlshim.report().rows, key=lambda r: -r["calls"])
    return ", ".join(f"`{r['op']}` " + " ".join(f"{a}={n}" for a, n in r["actions"].items())
                     for r in rows) or "nothing (no call intercepted)"


def reads():
    """The run's device-to-host reads, the model's and dmlshim's, with dmlshim's ops
    (``dmlshim.report().syncs``)."""
    syncs = dmlshim.report().syncs
    count = {who: sum(c["reads"] for c in ops.values()) for who, ops in syncs.items()}
    ops = ", ".join(f"`{op}` {c['reads']}" for op, c in sorted(syncs["dmlshim"].items(),
                                                               key=lambda x: -x[1]["reads"]))
    return f"{count['model']} / {count['dmlshim']}" + (f" ({ops})" if ops else "")


def evaluate(family, device):
    """One table row (a tuple of strings) and whether the shim run is within the profile
    (None: it fails with the shim too)."""
    reference, cpu_seconds = timed(family, torch.device("cpu"))
    dmlshim.deactivate()
    try:
        raw, _ = timed(family, device)
        text, ok = family.figures(raw, reference)
        raw_cell = "runs, within the profile" if ok else f"silently wrong ({text})"
    except Exception as exc:  # noqa: BLE001  (any failure is what the column reports)
        raw_cell = first_error(exc)
    dmlshim.activate()
    dmlshim.trace.reset()
    try:
        got, seconds = timed(family, device)
        text, ok = family.figures(got, reference)
        row = (family.name, raw_cell, shim_actions(), text, f"{seconds:.2f} s / {cpu_seconds:.2f} s",
               reads())
    except Exception as exc:  # noqa: BLE001
        ok = None        # a clear failure is a table entry, not a parity mismatch
        row = (family.name, raw_cell, f"does not fix it: {first_error(exc)}", "-", "-", "-")
    finally:
        dmlshim.deactivate()
    return row, ok


def plain(rows):
    return "\n\n".join("\n".join(f"  {h:<22} {c}" for h, c in zip(HEADER, row)) for row in rows)


def write_json(path, rows, extra):
    """The table as a results file: one ``{HEADER[i]: cell}`` row per family."""
    timing.write_json(path, "zoo", [dict(zip(HEADER, row)) for row in rows], extra)


@contextlib.contextmanager
def quiet():
    """FunASR and GFPGAN print progress and log lines; keep the table readable."""
    with open(os.devnull, "w") as null, contextlib.redirect_stdout(null), \
            contextlib.redirect_stderr(null):
        logging.disable(logging.WARNING)       # funasr logs INFO/WARNING on the root logger
        try:
            yield
        finally:
            logging.disable(logging.NOTSET)


def parse_args(argv=None):
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0],
                                formatter_class=argparse.RawDescriptionHelpFormatter,
                                epilog=__doc__.split("\n", 2)[2])
    p.add_argument("--only", nargs="+", metavar="WORD",
                   help="run only the families whose name contains one of these words "
                        "(case-insensitive)")
    p.add_argument("--json", type=Path, metavar="PATH",
                   help="also write the table as a results file (see above)")
    p.add_argument("--cache-dir", type=Path, default=None,
                   help="where random-weight models are built (default: ~/.cache/dmlshim)")
    return p.parse_args(argv)


def families(cache_dir, profile):
    root = cache_dir or Path(os.environ.get("DMLSHIM_CACHE") or Path.home() / ".cache" / "dmlshim")
    return funasr_families(root / "funasr", profile) + gfpgan_families(root / "gfpgan", profile)


def main(argv=None):
    args = parse_args(argv)
    device = emulation.install()
    profile = parity.default_profile(device)
    dmlshim.activate()   # basicsr must first be imported with the shim active (gfpgan_restore.py)
    import gfpgan  # noqa: F401
    dmlshim.deactivate()
    chosen = [f for f in families(args.cache_dir, profile)
              if not args.only or any(w.lower() in f.name.lower() for w in args.only)]
    if not chosen:
        sys.exit(f"--only {' '.join(args.only)}: no family matches")
    rows, outside = [], []
    threads = torch.get_num_threads()
    emulation.configure(rules=[DIRECTML_RANDOM_STREAM], extend=True)
    try:
        for family in chosen:
            print(f"running {family.name} ...", file=sys.stderr)
            with quiet():
                row, ok = evaluate(family, device)
            torch.set_num_threads(threads)  # AutoModel sets its own
            rows.append(row)
            if ok is False:
                outside.append(family.name)
    finally:
        emulation.configure()       # DirectML's defaults again
    extra = {"torch": torch.__version__, "numerics": emulation.numerics(), "profile": profile.name,
             "device": "emulated DirectML, with DirectML's own device random stream (failure_modes.md #35)"}
    print(f"torch {torch.__version__}, emulated DirectML device, {emulation.numerics()} numerics, "
          f"parity profile {profile.name!r}, random weights\n\n" + plain(rows))
    if args.json:
        write_json(args.json, rows, extra)
        print(f"\nwrote the table to {args.json}")
    if outside:
        print(f"\nOUTSIDE the {profile.name!r} profile with dmlshim: {', '.join(outside)}")
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
