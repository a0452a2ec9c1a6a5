"""FunASR Paraformer on the DirectML device: real funasr code, tiny random weights.

Model directories come from examples/funasr_models.py (funasr's own classes, loaded
through ``AutoModel``, the real loading code); fbank dither is 0, so the CPU and the
device see the same features; device results equal the CPU's within the parity
profile (``assert_parity``: exact on the emulator's CPU numerics).

Where each failure comes from (funasr 1.4.16, DESIGN.md "The real models"):
LSTM: the BiCif predictor's BiLSTM (bicif_paraformer/cif_predictor.py:186) and
SeACo's hotword encoder (packed sequences); empty-input cat: cif_predictor.py:85;
float64 cumsum: paraformer/cif_predictor.py:835; float x bool: the SANM masks
(sanm/attention.py:229, 238).
"""
import contextlib
from pathlib import Path

import pytest
import torch

import dmlshim
from dmlshim import devices, parity, patches, trace

# the funasr extra (`make test` installs it); examples/ is on sys.path (conftest.py)
from funasr.models.transformer.utils.nets_utils import pad_list
from funasr.utils.load_utils import extract_fbank, load_audio_text_image_video

import funasr_models
import funasr_transcribe

AUDIO = Path(__file__).resolve().parent.parent / "examples" / "data" / "zh.wav"
# With the seed-0 tiny weights, the English sample's CIF token count is 44.40: 44 fires
# and round(44.40) = 44 rows, so cif() pads with a (0, D) tensor -> the empty-input cat.
# (zh.wav gives 44.86: one row of padding, no empty cat.)
EN_AUDIO = AUDIO.with_name("en.wav")
HOTWORDS = "天气 公园"
# E_INVALIDARG as the device renders it: Windows' text, or WSL's and the real binary's
# here, "Unknown error -2147024809" (dmlshim/errors.py, failure_modes.md #28)
INVALIDARG = "The parameter is incorrect|Unknown error -2147024809"
ASR_KINDS = ("paraformer", "bicif", "seaco")


def auto_model(model_dir, device, **kwargs):
    return funasr_models.auto_model(model_dir, device, 1, **kwargs)  # ncpu 1: see below


def transcribe(model, hotword=None, audio=(AUDIO, EN_AUDIO)):
    """[(text, timestamps)] per sample, Mandarin and English by default."""
    res = model.generate([str(a) for a in audio], hotword=hotword, output_timestamp=True,
                         batch_size_s=0)
    return [(r["text"], r.get("timestamp")) for r in res]


def encode(model, device):
    """Encoder output (B, T, D) float32 and lengths (B,), on the CPU."""
    frontend = model.kwargs["frontend"]
    audio = load_audio_text_image_video(str(AUDIO), fs=frontend.fs)
    speech, lengths = extract_fbank(audio, data_type="sound", frontend=frontend)
    with torch.no_grad():
        out, out_lens = model.model.encode(speech.to(device), lengths.to(device))
    return out.cpu(), out_lens.cpu()


@pytest.fixture(scope="module")
def cpu_reference(funasr_model_dir):
    """kind -> {"text": [(text, timestamps)], "encoder": (out, lens)} on the CPU, once."""
    cache = {}

    def get(kind):
        if kind not in cache:
            model = auto_model(funasr_model_dir(kind), "cpu")
            cache[kind] = {"text": transcribe(model, HOTWORDS if kind == "seaco" else None),
                           "encoder": encode(model, "cpu")}
        return cache[kind]
    return get


@contextlib.contextmanager
def shim_without(monkeypatch, name, *more):
    """dmlshim active with every registered patch except ``name`` (and the catch-all
    ``auto`` fallback, which would send the failing call to the CPU instead): shows
    that this one fix is what the real model needs."""
    assert {name, *more} <= {p.name for p in patches.REGISTRY}, (name, more)
    monkeypatch.setattr(patches, "REGISTRY",
                        tuple(p for p in patches.REGISTRY if p.name not in (name, *more, "auto")))
    dmlshim.activate()
    try:
        yield
    finally:
        dmlshim.deactivate()
        monkeypatch.undo()


# ---------------------------------------------------------------- without the shim

@pytest.mark.parametrize("kind", ASR_KINDS)
def test_without_shim_the_model_fails_on_the_device(kind, funasr_model_dir, dml_device):
    """The first DirectML failure on the way, in every Paraformer: the SANM encoder's
    ``inputs * mask`` returns bool (float x bool, DirectML#686) and the FSMN conv1d
    rejects the bool tensor."""
    assert not dmlshim.is_active()
    model = auto_model(funasr_model_dir(kind), dml_device)
    with pytest.raises(RuntimeError, match=INVALIDARG) as info:
        transcribe(model, HOTWORDS if kind == "seaco" else None)
    assert "forward_fsmn" in [entry.name for entry in info.traceback]


@pytest.mark.parametrize("kind, missing, error, match", [
    ("bicif", "rnn", NotImplementedError, "_thnn_fused_lstm_cell"),
    ("bicif", "cat", RuntimeError, INVALIDARG),
    # without it the SANM encoder's conv1d gets a bool input: no convolution casts it back
    # (it would compute on 0/1 values), the mul fix is what the model needs
    ("paraformer", "mul", RuntimeError, "Bool|bool|" + INVALIDARG),
    ("paraformer", "dtypes", RuntimeError, "Float64"),
])
def test_each_fix_is_needed(kind, missing, error, match, funasr_model_dir, dml_device, monkeypatch):
    """With every patch but one, the real model hits exactly that DirectML failure."""
    if missing == "dtypes" and devices.reported_float64_support(dml_device):
        pytest.skip("this device's driver reports float64: the float64 cumsum runs, at float32 "
                    "precision, instead of failing (tests/test_patch_dtypes.py)")
    model = auto_model(funasr_model_dir(kind), dml_device)
    missing = (missing,) if isinstance(missing, str) else missing
    with shim_without(monkeypatch, *missing), pytest.raises(error, match=match):
        transcribe(model, audio=[EN_AUDIO])


def test_hotword_lstm_takes_a_packed_sequence(funasr_model_dir, dml_device, assert_parity):
    """SeACo's bias encoder LSTM gets a PackedSequence: no DirectML kernel without the
    shim; with it, the CPU's result exactly."""
    seen = []

    def hotword_vectors(device):
        m = auto_model(funasr_model_dir("seaco"), device)
        hook = m.model.bias_encoder.register_forward_pre_hook(
            lambda mod, args: seen.append(type(args[0])))
        hw = m.model.generate_hotwords_list(HOTWORDS, tokenizer=m.kwargs["tokenizer"],
                                            frontend=m.kwargs["frontend"])
        pad = pad_list([torch.tensor(h, dtype=torch.long) for h in hw], 0)
        lengths = torch.tensor([len(h) for h in hw], dtype=torch.int32)
        try:
            with torch.no_grad():
                return m.model._hotword_representation(pad.to(device), lengths.to(device)).cpu()
        finally:
            hook.remove()

    ref = hotword_vectors("cpu")
    with pytest.raises(NotImplementedError, match="_thnn_fused_lstm_cell"):
        hotword_vectors(dml_device)
    dmlshim.activate()
    try:
        got = hotword_vectors(dml_device)
    finally:
        dmlshim.deactivate()
    assert seen == [torch.nn.utils.rnn.PackedSequence] * 3
    assert ref.shape == (3, 32)  # two hotwords + <s>, inner_dim 32
    assert_parity(got, ref)


# ---------------------------------------------------------------- with the shim

@pytest.mark.parametrize("kind", ASR_KINDS)
def test_shim_matches_cpu(kind, funasr_model_dir, dml_device, cpu_reference, default_shim, profile, assert_parity):
    """Text, timestamps and encoder output on the device equal the CPU run within the
    profile: bit for bit on the emulator, the "device" profile on a GPU."""
    model = auto_model(funasr_model_dir(kind), dml_device)
    ref = cpu_reference(kind)
    got = transcribe(model, HOTWORDS if kind == "seaco" else None)
    assert len(got) == len(ref["text"])
    for (text, stamps), (ref_text, ref_stamps) in zip(got, ref["text"]):
        figures = parity.compare_transcripts(text, ref_text, stamps, ref_stamps)
        assert figures.within(profile), f"{figures}\n  device: {text}\n  cpu:    {ref_text}"
    text, stamps = got[0]
    assert text.strip() and len(stamps) > 0         # random weights still emit tokens
    out, lens = encode(model, dml_device)
    assert_parity((out, lens), ref["encoder"])


def test_inference_mode_fails_without_the_shim(funasr_model_dir, dml_device):
    """A model loaded to DirectML, called inside torch.inference_mode(): a view of a weight
    fails (DirectML#602, failure_modes.md #41) before anything else."""
    model = auto_model(funasr_model_dir("seaco"), dml_device)
    with torch.inference_mode(), pytest.raises(RuntimeError, match="Cannot set version_counter"):
        transcribe(model, HOTWORDS, audio=[EN_AUDIO])


def test_inference_mode_matches_cpu(funasr_model_dir, dml_device, cpu_reference, default_shim, profile):
    """SeacoParaformer (BiLSTM, empty cat, float x bool, hotwords) inside inference_mode:
    on the device, no CPU retry of a failed call, as on the CPU."""
    from dmlshim.patches import auto

    model = auto_model(funasr_model_dir("seaco"), dml_device)
    with torch.inference_mode():
        got = transcribe(model, HOTWORDS)
    for (text, stamps), (ref_text, ref_stamps) in zip(got, cpu_reference("seaco")["text"]):
        figures = parity.compare_transcripts(text, ref_text, stamps, ref_stamps)
        assert figures.within(profile), f"{figures}\n  device: {text}\n  cpu:    {ref_text}"
    assert "version_counter" not in str(auto.failures())


def test_report_shows_the_interceptions(funasr_model_dir, dml_device, default_shim):
    """report(): the LSTMs and cat/mul/float64 fixes were intercepted, bytes were moved."""
    transcribe(auto_model(funasr_model_dir("seaco"), dml_device), HOTWORDS)
    transcribe(auto_model(funasr_model_dir("paraformer"), dml_device))
    rows = {r["op"]: r for r in dmlshim.report().rows}

    def handled(*needles, action=None):
        return [op for op, r in rows.items()
                if any(n in op.lower() for n in needles)
                and (action is None or r["actions"].get(action, 0) > 0)]

    assert handled("lstm", "rnn", action="cpu"), rows           # patch rnn: LSTMs on the CPU
    assert handled("cat", action="coerce"), rows                 # an empty input dropped
    assert handled("mul", action="coerce"), rows                 # float x bool mask
    assert handled("cumsum", "float64", "dtype"), rows           # float64 cumsum
    assert sum(r["h2d"] for r in rows.values()) > 0
    assert sum(r["d2h"] for r in rows.values()) > 0
    assert "calls" in str(dmlshim.report())


def test_vad_and_punctuation_pipeline(funasr_model_dir, dml_device, default_shim, profile):
    """FSMN-VAD + SeACo-Paraformer + CT-Transformer punctuation: the device's transcript is
    the CPU's within the profile (a device's rounding may move a token or a timestamp)."""
    dirs = {k: str(funasr_model_dir(k)) for k in ("seaco", "vad", "punc")}

    def run(device):
        model = auto_model(dirs["seaco"], device, vad_model=dirs["vad"], punc_model=dirs["punc"])
        return transcribe(model, HOTWORDS)

    ref = run("cpu")
    got = run(dml_device)
    assert len(got) == len(ref)
    for (text, stamps), (ref_text, ref_stamps) in zip(got, ref):
        figures = parity.compare_transcripts(text, ref_text, stamps, ref_stamps)
        assert figures.within(profile), f"{figures}\n  device: {text}\n  cpu:    {ref_text}"
    text, stamps = got[0]
    assert text.strip() and len(stamps) > 0


def _compare_with_cpu(tmp_path, device_kind, *options):
    """examples/funasr_transcribe.py --compare-cpu on the test device: its exit status."""
    try:
        return funasr_transcribe.main([str(AUDIO), "--device", device_kind, "--compare-cpu", *options,
                                       "--ncpu", "1", "--cache-dir", str(tmp_path)])
    finally:
        dmlshim.deactivate()


def test_example_script_compares_with_cpu(tmp_path, capsys, device_kind, profile):
    """examples/funasr_transcribe.py (what `make demo` runs), on one file."""
    status = _compare_with_cpu(tmp_path, device_kind, "--hotword", HOTWORDS)
    out = capsys.readouterr().out
    assert status == 0, out
    assert "RANDOM weights" in out and f"within the '{profile}' profile" in out
    assert "zh.wav: text equal, 0 token edit(s)" in out


@pytest.mark.parametrize("shift_ms, tolerance, status", [
    (60, "device", 0),      # one Paraformer frame: what a GPU's rounding may do
    (60, "exact", 1),
    (-10**6, "device", 1),  # a timestamp that is simply wrong
])
def test_example_script_exits_1_outside_the_profile(tmp_path, capsys, device_kind, monkeypatch,
                                                    shift_ms, tolerance, status):
    """--compare-cpu exits 1 only when text or timestamps differ beyond --tolerance."""
    real = funasr_transcribe.transcribe

    def transcribe(model, paths, hotword, desc):
        results = real(model, paths, hotword, desc)
        if desc != "cpu":                       # move the device run's first end time
            first = next(iter(results.values()))
            (start, end), rest = first["timestamp"][0], first["timestamp"][1:]
            first["timestamp"] = [[start, max(start, end + shift_ms)]] + rest
        return results

    monkeypatch.setattr(funasr_transcribe, "transcribe", transcribe)
    got = _compare_with_cpu(tmp_path, device_kind, "--tolerance", tolerance)
    out = capsys.readouterr().out
    assert got == status, out
    assert ("MISMATCH" in out and "timestamp differs" in out) == bool(status)
