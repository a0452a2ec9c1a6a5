"""Transcribe speech with FunASR on an AMD/Intel GPU through DirectML, with dmlshim.

    python examples/funasr_transcribe.py                          # bundled samples, random weights
    python examples/funasr_transcribe.py talk.wav --model paraformer-zh \\
        --vad-model fsmn-vad --punc-model ct-punc                 # real models (needs internet once)
    python examples/funasr_transcribe.py --device emulated --compare-cpu --hotword "天气 公园"
                                                                  # what `make demo` runs

The model runs with funasr's ``AutoModel`` on ``dmlshim.select_device()`` (or
``--device``) while dmlshim is active: what DirectML gets wrong in Paraformer
(the LSTMs, an empty-input ``cat``, float x bool masks, float64) is fixed or sent
to the CPU and back. ``--compare-cpu`` transcribes again on the CPU, prints the
parity figures per file (tokens, timestamps; dmlshim.parity) and exits with
status 1 if they fall outside the tolerance profile: ``exact`` on the emulated
device (it runs the CPU's own kernels), ``device`` on a real GPU (same tokens,
timestamps within one 60 ms frame); ``--tolerance`` picks one.

Without ``--model`` a small SeacoParaformer with *random weights* is built
offline (examples/funasr_models.py): it runs the real model code, but its text
is meaningless. ``--vad-model random`` / ``--punc-model random`` do the same
for FSMN-VAD and CT-Transformer punctuation.
"""
import argparse
import os
import sys
from pathlib import Path

HERE = Path(__file__).resolve().parent
SAMPLES = [HERE / "data" / "zh.wav", HERE / "data" / "en.wav"]
sys.path.insert(0, str(HERE))  # funasr_models lives next to this file

DEVICES = ("auto", "directml", "cpu", "emulated")


def parse_args(argv=None):
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0],
                                formatter_class=argparse.RawDescriptionHelpFormatter,
                                epilog=__doc__.split("\n", 2)[2])
    p.add_argument("audio", nargs="*", type=Path, default=SAMPLES,
                   help="audio files (16 kHz WAV works everywhere); default: the bundled "
                        "Mandarin and English samples in examples/data")
    p.add_argument("--model", help="FunASR model: a local model directory or a hub name such "
                                   "as paraformer-zh (needs internet). Default: a random-weight "
                                   "SeacoParaformer built offline (meaningless text)")
    p.add_argument("--vad-model", help="voice activity detection model (dir or hub name such as "
                                       "fsmn-vad), or 'random'")
    p.add_argument("--punc-model", help="punctuation model (dir or hub name such as ct-punc), "
                                        "or 'random'")
    p.add_argument("--hotword", help="hotwords separated by spaces (SeacoParaformer), e.g. '天气 公园'")
    p.add_argument("--device", choices=DEVICES, default="auto",
                   help="auto: dmlshim.select_device() (cuda > directml > xpu > mps > cpu); "
                        "emulated: dmlshim's emulated DirectML device (no GPU needed)")
    p.add_argument("--trace", nargs="?", const="1", default=None, metavar="FILE",
                   help="trace every intercepted call: to the log, or to FILE as JSON Lines")
    p.add_argument("--compare-cpu", action="store_true",
                   help="transcribe again on the CPU; exit 1 if text or timestamps differ "
                        "beyond the tolerance profile")
    p.add_argument("--tolerance", choices=("device", "exact"),
                   help="parity profile for --compare-cpu (default: exact on the emulated "
                        "device with CPU numerics, device otherwise)")
    p.add_argument("--ncpu", type=int, default=min(4, os.cpu_count() or 1),
                   help="CPU threads for torch (default: %(default)s)")
    p.add_argument("--cache-dir", type=Path, default=None,
                   help="where random-weight models are built (default: ~/.cache/dmlshim/funasr)")
    args = p.parse_args(argv)
    missing = [str(a) for a in args.audio if not a.is_file()]
    if missing:
        p.error(f"audio file(s) not found: {', '.join(missing)}")
    if args.ncpu < 1:
        p.error(f"--ncpu must be at least 1, got {args.ncpu}")
    return args


def resolve_device(name):
    """torch.device for a --device choice. Raises ValueError when it is unavailable."""
    import dmlshim
    import torch

    if name == "emulated":
        from dmlshim import emulation
        return emulation.install()
    if name == "cpu":
        return torch.device("cpu")
    # auto honours DMLSHIM_DEVICE / INFERENCE_DEVICE; ValueError when not present
    return dmlshim.select_device(None if name == "auto" else name)


def resolve_models(args):
    """(model, vad_model, punc_model) as AutoModel arguments; builds random ones offline."""
    from funasr_models import build

    random_kinds = []

    def pick(value, kind):
        if value == "random":
            random_kinds.append(kind)
            return str(build(kind, cache_dir=args.cache_dir))
        return value

    model = pick(args.model or "random", "seaco")
    return model, pick(args.vad_model, "vad"), pick(args.punc_model, "punc"), random_kinds


def load(models, device, ncpu):
    from funasr_models import auto_model

    model, vad, punc, _ = models
    return auto_model(model, device, ncpu, vad_model=vad, punc_model=punc)


def transcribe(auto_model, paths, hotword, desc):
    """{path: {"text", "timestamp"}} with a progress bar over the files."""
    from tqdm import tqdm

    # batch_size_s=0: with a VAD model, funasr batches segments on any device but
    # the CPU; one segment at a time keeps the device run comparable to the CPU run.
    options = {"hotword": hotword, "output_timestamp": True, "batch_size_s": 0}
    results = {}
    for path in tqdm(paths, desc=desc, unit="file", file=sys.stderr):
        res = auto_model.generate(str(path), **options)
        first = res[0] if res else {}
        results[str(path)] = {"text": first.get("text", ""),
                              "timestamp": first.get("timestamp", [])}
    return results


def show(results):
    for path, r in results.items():
        ts = r["timestamp"]
        span = f"{len(ts)} timestamps, {ts[0][0]}-{ts[-1][1]} ms" if ts else "no timestamps"
        print(f"{Path(path).name}: {r['text']}")
        print(f"  [{span}] {ts[:6]}{' ...' if len(ts) > 6 else ''}")


def differences(device_results, cpu_results, profile):
    """(one figures line per file, lines describing each file outside ``profile``)."""
    from dmlshim import parity

    figures, outside = [], []
    for path, d in device_results.items():
        c = cpu_results[path]
        f = parity.compare_transcripts(d["text"], c["text"], d["timestamp"], c["timestamp"])
        figures.append(f"{Path(path).name}: {f}")
        if not f.within(profile):
            for key in ("text", "timestamp"):
                if d[key] != c[key]:
                    outside.append(f"{Path(path).name}: {key} differs ({f})\n"
                                   f"  device: {d[key]}\n  cpu:    {c[key]}")
    return figures, outside


def main(argv=None):
    args = parse_args(argv)
    import dmlshim

    try:
        device = resolve_device(args.device)
    except (ValueError, ImportError) as exc:
        hint = ('\n  DirectML needs Windows (or WSL2) and torch-directml: pip install '
                '"dmlshim[funasr,directml]"; --device emulated runs without a GPU'
                if args.device == "directml" else "")
        sys.exit(f"--device {args.device}: {exc}{hint}")
    dmlshim.activate(trace=args.trace)
    models = resolve_models(args)
    if "seaco" in models[3]:
        print("NOTE: no --model given, so this is a SeacoParaformer with RANDOM weights, built "
              "offline: the model code is real, the text is meaningless.\n"
              "      For real transcriptions pass --model paraformer-zh (downloads once) or "
              "--model <local FunASR model dir>.")
    for kind in (k for k in models[3] if k != "seaco"):
        print(f"NOTE: the {kind} model has random weights (built offline).")
    print(f"device: {device} (--device {args.device}); dmlshim active: {dmlshim.is_active()}")

    model = load(models, device, args.ncpu)  # kept alive: report() shows its cached weights
    results = transcribe(model, args.audio, args.hotword, str(device))
    show(results)
    print("\ndmlshim: intercepted calls on the device")
    print(dmlshim.report())

    if args.compare_cpu:
        from dmlshim import parity

        profile = parity.profile(args.tolerance or parity.default_profile(device))
        cpu_results = transcribe(load(models, "cpu", args.ncpu), args.audio, args.hotword, "cpu")
        figures, outside = differences(results, cpu_results, profile)
        print(f"\nparity with the CPU ({profile.name!r} profile: <= {profile.max_token_edits} "
              f"token edits, timestamps within {profile.max_timestamp_ms:g} ms):")
        print("\n".join("  " + line for line in figures))
        if outside:
            print(f"\nMISMATCH: {device} and cpu differ beyond the {profile.name!r} profile:\n"
                  + "\n".join(outside))
            return 1
        print(f"\nwithin the {profile.name!r} profile: text and timestamps on {device} match "
              f"the CPU run ({len(results)} file(s))")
    return 0


if __name__ == "__main__":
    sys.exit(main())
