"""FunASR's own OpenAI-compatible server on the emulated DirectML device, zero code edited.

``python -m dmlshim run --device emulated funasr-server --device privateuseone:0
--model-path DIR --host 127.0.0.1 --port N`` (a tiny random-weight SeacoParaformer:
LSTMs, the empty-input cat, float x bool masks), driven by the official ``openai``
client from concurrent threads, with bad uploads in between. Transcripts must equal
the CPU's (funasr's own AutoModel on the CPU, as the server calls it). The load
benchmark (benchmarks/server_load.py) runs a CPU server beside it.
"""
import concurrent.futures as cf
import re
import shutil
import time
from pathlib import Path

import openai
import pytest
import torch
import yaml

import funasr_models  # examples/ is on sys.path (conftest.py)
from funasr_server import Server, bad_uploads, samples, transcribe

THREADS, REQUESTS, BUDGET_S = 3, 9, 90        # bounded in count and time


@pytest.fixture(scope="module")
def model_dir(tmp_path_factory):
    """The seaco test model with ``ncpu: 1`` in its config: funasr-server passes no ncpu,
    and AutoModel's default of 4 threads makes 2 cores wait on each other."""
    src = funasr_models.build("seaco", cache_dir=tmp_path_factory.mktemp("funasr_server_models"))
    dst = tmp_path_factory.mktemp("server_model") / src.name
    shutil.copytree(src, dst)
    config = yaml.safe_load((dst / "config.yaml").read_text(encoding="utf-8"))
    (dst / "config.yaml").write_text(yaml.safe_dump(dict(config, ncpu=1), allow_unicode=True),
                                     encoding="utf-8")
    return dst


def cpu_transcripts(model_dir, uploads, tmp_path):
    """What the server computes (``_process_fallback``: generate(batch_size=1), tags
    stripped), with funasr's AutoModel on the CPU in this process."""
    threads = torch.get_num_threads()
    model = funasr_models.auto_model(model_dir, "cpu", 1)
    try:
        out = {}
        for name, data in uploads.items():
            path = tmp_path / name
            path.write_bytes(data)
            raw = model.generate(input=str(path), batch_size=1)[0]["text"]
            out[name] = re.sub(r"<\|[^|]*\|>", "", raw).strip()
        return out
    finally:
        torch.set_num_threads(threads)


@pytest.mark.emulated_only(
    reason="examples/funasr_server.Server serves on the emulated device in a child (dmlshim run "
           "--device emulated funasr-server); it has no real-device mode")
def test_server_on_emulated_device_under_load_and_bad_uploads(model_dir, tmp_path):
    good = samples()
    odd = {k: v for k, v in bad_uploads(silence_s=20).items() if k in ("8khz.wav", "silence.wav")}
    expected = cpu_transcripts(model_dir, {**good, **odd}, tmp_path)
    with Server("emulated", model_dir, log_dir=tmp_path, report=True) as server:
        client = server.client(max_retries=2)     # the client's default retry policy
        health = server.health()
        assert health["device"] == "privateuseone:0" and health["models_loaded"] == ["custom"]

        names = [list(good)[i % len(good)] for i in range(REQUESTS)]
        start = time.monotonic()
        with cf.ThreadPoolExecutor(THREADS) as pool:
            texts = list(pool.map(lambda n: (n, transcribe(client, good[n], n)), names,
                                  timeout=BUDGET_S))
        assert time.monotonic() - start < BUDGET_S
        assert all(text == expected[name] and text for name, text in texts)

        for name, data in bad_uploads(silence_s=20).items():
            if name in odd:                         # decodable: resampled / silent, answered
                assert transcribe(client, data, name) == expected[name], name
            else:                                   # undecodable: an HTTP error, not a hang
                with pytest.raises(openai.InternalServerError) as info:
                    transcribe(client, data, name)
                assert info.value.status_code == 500
            assert transcribe(client, good["zh.wav"]) == expected["zh.wav"]   # still serving
        assert server.proc.poll() is None
    log = server.log_tail(20000)
    assert "soundfile.LibsndfileError" in log              # why the undecodable ones failed
    report = log[log.index("dmlshim report"):]
    assert re.search(r"aten::lstm\.\w+\s+\d+\s+cpu=", report) and re.search(r"aten::cat\s+\d+\s+coerce=", report)


@pytest.fixture(scope="module")
def nano_dir(tmp_path_factory):
    """The tiny random Fun-ASR-Nano (SenseVoice encoder + Qwen3) with ``ncpu: 1``."""
    src = funasr_models.build("nano", cache_dir=tmp_path_factory.mktemp("funasr_server_nano"))
    dst = tmp_path_factory.mktemp("server_nano") / src.name
    shutil.copytree(src, dst)              # its LLM paths stay absolute, into src
    config = yaml.safe_load((dst / "config.yaml").read_text(encoding="utf-8"))
    (dst / "config.yaml").write_text(yaml.safe_dump(dict(config, ncpu=1), allow_unicode=True),
                                     encoding="utf-8")
    return dst


@pytest.mark.emulated_only(
    reason="examples/funasr_server.Server serves on the emulated device in a child (dmlshim run "
           "--device emulated funasr-server); it has no real-device mode")
def test_fun_asr_nano_serves_the_cpu_transcripts(nano_dir, tmp_path):
    """``dmlshim run --device emulated funasr-server --model fun-asr-nano --model-path DIR
    --device privateuseone:0``: the openai client gets the CPU's text (issue 20). Raw,
    the Qwen3 decode fails on the device (tests/test_funasr_families.py)."""
    good = samples()
    expected = cpu_transcripts(nano_dir, good, tmp_path)
    with Server("emulated", nano_dir, log_dir=tmp_path, report=True, model="fun-asr-nano") as server:
        health = server.health()
        assert health["device"] == "privateuseone:0" and health["models_loaded"] == ["custom"]
        client = server.client(max_retries=0)
        texts = {name: transcribe(client, data, name) for name, data in good.items()}
    assert texts == expected and all(texts.values()), (texts, expected)
    log = server.log_tail(20000)
    assert re.search(r"aten::cat\s+\d+\s+coerce=", log[log.index("dmlshim report"):])


@pytest.mark.emulated_only(
    reason="examples/funasr_server.Server serves on the emulated device in a child (dmlshim run "
           "--device emulated funasr-server); it has no real-device mode")
def test_whisper_with_real_weights_serves_real_words(tmp_path):
    """funasr-server with Whisper tiny.en's real weights (examples/whisper_weights.py) on the
    emulated device: the reply holds the words spoken in examples/data/en.wav."""
    import whisper_weights

    src = whisper_weights.funasr_dir()
    dst = tmp_path / src.name
    shutil.copytree(src, dst)
    config = yaml.safe_load((dst / "config.yaml").read_text(encoding="utf-8"))
    (dst / "config.yaml").write_text(yaml.safe_dump(dict(config, ncpu=1)), encoding="utf-8")
    data = (Path(__file__).resolve().parent.parent / "examples" / "data" / "en.wav").read_bytes()
    with Server("emulated", dst, log_dir=tmp_path) as server:
        text = transcribe(server.client(max_retries=0), data, "en.wav")
    assert "graphics card" in text and "lazy dog" in text, text
