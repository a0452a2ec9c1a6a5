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
is meaningless. ``--model random:KIND`` picks another family (KIND: paraformer,
bicif, seaco, sensevoice, paraformer-streaming, whisper, nano = Fun-ASR-Nano:
SenseVoice encoder + Qwen3, docs/fun-asr-nano.md); ``--vad-model random``
/ ``--punc-model random`` / ``--spk-model random`` do the same for FSMN-VAD,
CT-Transformer punctuation and cam++ speaker labels (``spk_model`` needs a VAD
model: a random one is added when none is given).

Exit status: 0 done (and within the profile); 1 outside the profile.

``random:paraformer-streaming`` runs FunASR's streaming loop over each file, as
FunASR's streaming example does: 600 ms chunks (``chunk_size=[0, 10, 5]``), one
``cache`` per file, ``is_final`` on the last chunk.
"""
import argparse
import os
import sys
from pathlib import Path

HERE = Path(__file__).resolve().parent
SAMPLES = [HERE / "data" / "zh.wav", HERE / "data" / "en.wav"]
sys.path.insert(0, str(HERE))  # funasr_models lives next to this file

DEVICES = ("auto", "directml", "cpu", "emulated")
# --model random:KIND; plain "random" is random:seaco (paraformer-zh's architecture)
RANDOM_KINDS = ("paraformer", "bicif", "seaco", "sensevoice", "paraformer-streaming", "whisper",
                "nano")
# FunASR's streaming example: 600 ms chunks (10 x 60 ms), look-back 4 / 1 chunks
STREAM_CHUNK = [0, 10, 5]
STREAM_LOOK_BACK = {"encoder_chunk_look_back": 4, "decoder_chunk_look_back": 1}


def parse_args(argv=None):
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0],
                                formatter_class=argparse.RawDescriptionHelpFormatter,
                                epilog=__doc__.split("\n", 2)[2])
    p.add_argument("audio", nargs="*", type=Path, default=SAMPLES,
                   help="audio files (16 kHz WAV works everywhere); default: the bundled "
                        "Mandarin and English samples in examples/data")
    p.add_argument("--model", help="FunASR model: a local model directory or a hub name such "
                                   "as paraformer-zh (needs internet), or random:KIND for a "
                                   f"random-weight model built offline, KIND in {', '.join(RANDOM_KINDS)}"
                                   " (meaningless text). Default: random:seaco")
    p.add_argument("--vad-model", help="voice activity detection model (dir or hub name such as "
                                       "fsmn-vad), or 'random'")
    p.add_argument("--punc-model", help="punctuation model (dir or hub name such as ct-punc), "
                                        "or 'random'")
    p.add_argument("--spk-model", help="speaker model for speaker labels per sentence (dir or hub "
                                       "name such as cam++), or 'random'; needs a VAD model")
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
    p.add_argument("--verbose", action="store_true",
                   help="print the table of defects activate() probed with the report")
    p.add_argument("--cache-dir", type=Path, default=None,
                   help="where random-weight models are built (default: ~/.cache/dmlshim/funasr)")
    args = p.parse_args(argv)
    missing = [str(a) for a in args.audio if not a.is_file()]
    if missing:
        p.error(f"audio file(s) not found: {', '.join(missing)}")
    if args.model and args.model.startswith("random") and random_kind(args.model) is None:
        p.error(f"--model {args.model}: allowed random kinds are "
                + ", ".join(f"random:{k}" for k in RANDOM_KINDS))
    extras = [f"--{name.replace('_', '-')}" for name in ("vad_model", "punc_model", "spk_model")
              if getattr(args, name)]
    if args.model == "random:paraformer-streaming" and extras:
        # FunASR streams a bare model chunk by chunk; AutoModel's VAD/punctuation/speaker
        # pipeline takes whole files only
        p.error(f"--model random:paraformer-streaming streams chunk by chunk and takes no "
                f"{', '.join(extras)}: those work with the offline models only")
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


def random_kind(model):
    """The KIND of ``random`` / ``random:KIND`` (``random`` = seaco); None for a bad KIND."""
    kind = model.partition(":")[2] or "seaco"
    return kind if model in ("random", f"random:{kind}") and kind in RANDOM_KINDS else None


def resolve_models(args):
    """{"model", "vad_model", "punc_model", "spk_model"} as AutoModel arguments, plus
    "random" (the kinds built offline, in order) and "kind" (the main model's kind,
    None for a model that was not built here)."""
    from funasr_models import build

    random_kinds = []

    def pick(value, kind):
        if value == "random":
            random_kinds.append(kind)
            return str(build(kind, cache_dir=args.cache_dir))
        return value

    kind = random_kind(args.model or "random")
    model = pick("random", kind) if kind else args.model
    vad = args.vad_model or ("random" if args.spk_model else None)  # spk_model needs VAD segments
    return {"model": model, "vad_model": pick(vad, "vad"),
            "punc_model": pick(args.punc_model, "punc"),
            "spk_model": pick(args.spk_model, "campplus"), "random": random_kinds, "kind": kind}


def load(models, device, ncpu):
    from funasr_models import auto_model

    return auto_model(models["model"], device, ncpu, vad_model=models["vad_model"],
                      punc_model=models["punc_model"], spk_model=models["spk_model"])


def stream(auto_model, path):
    """FunASR's streaming loop over one file: ``{"text", "timestamp": []}``.

    Feeds 600 ms chunks of the 16 kHz samples with one ``cache`` dict, ``is_final``
    on the last chunk, as FunASR's paraformer-zh-streaming example does; the text
    is the concatenation of what each chunk emits.
    """
    import soundfile

    speech, rate = soundfile.read(str(path), dtype="float32")
    if rate != 16000:
        raise ValueError(f"{path}: streaming needs 16 kHz audio, the file has {rate} Hz")
    stride = STREAM_CHUNK[1] * 960  # samples per chunk: 10 x 60 ms at 16 kHz
    chunks = max(1, (len(speech) + stride - 1) // stride)
    cache, text = {}, ""
    for i in range(chunks):
        res = auto_model.generate(input=speech[i * stride:(i + 1) * stride], cache=cache,
                                  is_final=i == chunks - 1, chunk_size=STREAM_CHUNK,
                                  **STREAM_LOOK_BACK)
        text += "".join(r.get("text", "") for r in res)
    return {"text": text, "timestamp": []}


def transcribe_streaming(auto_model, paths, desc):
    """{path: {"text", "timestamp": []}}: :func:`stream` over each file."""
    from tqdm import tqdm

    return {str(path): stream(auto_model, path)
            for path in tqdm(paths, desc=desc, unit="file", file=sys.stderr)}


def run(auto_model, paths, hotword, desc, streaming):
    """:func:`transcribe_streaming` for a streaming model, else :func:`transcribe`."""
    if streaming:
        return transcribe_streaming(auto_model, paths, desc)
    return transcribe(auto_model, paths, hotword, desc)


def transcribe(auto_model, paths, hotword, desc):
    """{path: {"text", "timestamp"[, "speakers"]}} with a progress bar over the files.

    ``timestamp``: [[start_ms, end_ms], ...]; ``speakers``: the speaker label of each
    sentence, when a speaker model is loaded.
    """
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
        if "sentence_info" in first:
            results[str(path)]["speakers"] = [s["spk"] for s in first["sentence_info"]]
    return results


def show(results):
    for path, r in results.items():
        ts = r["timestamp"]
        span = f"{len(ts)} timestamps, {ts[0][0]}-{ts[-1][1]} ms" if ts else "no timestamps"
        print(f"{Path(path).name}: {r['text']}")
        print(f"  [{span}] {ts[:6]}{' ...' if len(ts) > 6 else ''}")
        if "speakers" in r:
            print(f"  speaker per sentence: {r['speakers']}")


def differences(device_results, cpu_results, profile):
    """(one figures line per file, lines describing each file outside ``profile``)."""
    from dmlshim import parity

    figures, outside = [], []
    for path, d in device_results.items():
        c = cpu_results[path]
        f = parity.compare_transcripts(d["text"], c["text"], d["timestamp"], c["timestamp"])
        figures.append(f"{Path(path).name}: {f}")
        if d.get("speakers") != c.get("speakers"):  # labels are discrete: any change is wrong
            outside.append(f"{Path(path).name}: speaker labels differ\n"
                           f"  device: {d.get('speakers')}\n  cpu:    {c.get('speakers')}")
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
    kind = models["kind"]
    if kind:
        print(f"NOTE: --model random:{kind} is a {kind} model with RANDOM weights, built "
              "offline: the model code is real, the text is meaningless.\n"
              "      For real transcriptions pass --model paraformer-zh (downloads once) or "
              "--model <local FunASR model dir>.")
    for other in models["random"][1 if kind else 0:]:
        print(f"NOTE: the {other} model has random weights (built offline).")
    print(f"device: {device} (--device {args.device}); dmlshim active: {dmlshim.is_active()}")

    streaming = kind == "paraformer-streaming"
    model = load(models, device, args.ncpu)      # kept alive: report() shows its cached weights
    results = run(model, args.audio, args.hotword, str(device), streaming)
    show(results)
    print("\ndmlshim: intercepted calls on the device")
    report = dmlshim.report()
    print(report if args.verbose else report.brief())

    if args.compare_cpu:
        from dmlshim import parity

        profile = parity.profile(args.tolerance or parity.default_profile(device))
        cpu_results = run(load(models, "cpu", args.ncpu), args.audio, args.hotword, "cpu",
                          streaming)
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
