"""FunASR's other model families on the DirectML device: SenseVoiceSmall, the streaming
Paraformer (chunked, with a cache), cam++ speaker labels, emotion2vec, Whisper,
Fun-ASR-Nano (SenseVoice encoder + Qwen3 through transformers); tiny random weights.

Real funasr code throughout (examples/funasr_models.py builds the model directories,
``AutoModel`` loads them); each family first fails raw on the device where DirectML
fails, then matches the CPU with dmlshim active, compared through dmlshim.parity with
the session's profile (exact on the emulator, "device" under GPU numerics).

Where each raw failure comes from (funasr 1.4.16): SenseVoice's timestamp pass does
``logits[pred == blank, blank] = 0`` with a CPU mask on a device tensor
(sense_voice/model.py:1054); the streaming Paraformer's CIF does float64 arithmetic,
which most DirectML GPUs lack (failure_modes.md #7); Fun-ASR-Nano's Qwen3 decode
concatenates onto an empty KV cache (failure_modes.md, empty-input cat). cam++ and emotion2vec need no fix;
Whisper's sparse alignment_heads buffer cannot be moved to DirectML (failure_modes.md #30):
with dmlshim it stays on the CPU as an island.
"""
from pathlib import Path

import pytest
import torch

import dmlshim
from dmlshim import parity

import funasr_models
import funasr_transcribe

AUDIO = Path(__file__).resolve().parent.parent / "examples" / "data" / "zh.wav"
# E_INVALIDARG as the device renders it: Windows' text, or WSL's and the real binary's
# here, "Unknown error -2147024809" (dmlshim/errors.py, failure_modes.md #28)
INVALIDARG = "The parameter is incorrect|Unknown error -2147024809"


@pytest.fixture(scope="module")
def model_dir(tmp_path_factory):
    """kind -> a tiny random-weight model directory, built once for this module."""
    cache = tmp_path_factory.mktemp("funasr_families")
    return lambda kind: funasr_models.build(kind, cache_dir=cache)


def load(model_dir, kind, device, **kw):
    return funasr_models.auto_model(model_dir(kind), device, 1, **kw)


def transcribe(model, kind):
    """{"text", "timestamp"} of AUDIO, streamed chunk by chunk for the streaming kind."""
    if kind == "paraformer-streaming":
        return funasr_transcribe.stream(model, AUDIO)
    return funasr_transcribe.transcribe(model, [AUDIO], None, "test")[str(AUDIO)]


def speaker_embedding(model_dir, device):
    """cam++'s 192-dim embedding of AUDIO, (1, 192) float32 on the CPU."""
    res = load(model_dir, "campplus", device).generate(str(AUDIO))
    return res[0]["spk_embedding"].cpu()


@pytest.mark.parametrize("kind, error", [
    # (sensevoice's CPU bool mask is an index, which the real 0.2.5 binary takes (#10,
    # benchmarks/results/fidelity-defects.json): it runs raw; test_shim_matches_cpu)
    # float64: refused without float64; with it reported (the realdml stack's default),
    # DirectML's element-wise operators take no FLOAT64: E_INVALIDARG
    ("paraformer-streaming", "does not support Double|" + INVALIDARG),
    ("nano", INVALIDARG),                                  # empty-input cat (transformers' KV cache)
])
def test_without_shim_the_model_fails_on_the_device(kind, error, model_dir, dml_device):
    assert not dmlshim.is_active()
    with pytest.raises(RuntimeError, match=error):
        transcribe(load(model_dir, kind, dml_device), kind)


@pytest.mark.parametrize("kind", ["sensevoice", "paraformer-streaming", "nano"])
def test_shim_matches_cpu(kind, model_dir, dml_device, default_shim, profile):
    """Text (and SenseVoice's timestamps) equal the CPU run within the profile."""
    ref = transcribe(load(model_dir, kind, "cpu"), kind)
    got = transcribe(load(model_dir, kind, dml_device), kind)
    figures = parity.compare_transcripts(got["text"], ref["text"], got["timestamp"],
                                         ref["timestamp"])
    assert figures.within(profile), f"{figures}\n  device: {got['text']}\n  cpu:    {ref['text']}"
    assert figures.tokens > 10                  # random weights still emit tokens
    assert bool(got["timestamp"]) == (kind == "sensevoice")   # streaming has none
    actions = {r["op"]: r["actions"] for r in dmlshim.report().rows}
    # sensevoice fails nowhere raw (above): one `lt` of operands of two ranks and dtypes is
    # reshaped (int_broadcast; the real binary reads the smaller operand's first value, which
    # a batch of one survives), its CTC alignment's gather(dim=-1) counted from 0 (#43: its
    # timestamps), views of offset views remade (offset_views); the others would fail again
    # without the shim
    if kind == "sensevoice":
        # pass: looked, did nothing; range read: learned an integer operand's range
        fixed = {op for op, acts in actions.items() if set(acts) - {"anchored", "pass", "range read"}}
        # and its max along a dim / argmax made NaN-aware (nan_reductions: the real binary's
        # skip NaN), its log_softmax too (nan_sort: NaN over a slice holding NaN), on every call
        assert fixed <= {"aten::lt.Tensor", "aten::gather", "aten::max.dim", "aten::argmax",
                         "aten::_log_softmax"}, actions
    else:
        assert actions, actions


def test_streaming_loop_feeds_600ms_chunks_into_one_cache(model_dir):
    """FunASR's streaming example: 9600-sample chunks, one cache, is_final on the last."""
    import soundfile

    model = load(model_dir, "paraformer-streaming", "cpu")
    calls, real = [], model.generate

    def generate(**kw):
        calls.append((len(kw["input"]), id(kw["cache"]), kw["is_final"], kw["chunk_size"]))
        return real(**kw)

    model.generate = generate
    text = funasr_transcribe.stream(model, AUDIO)["text"]
    samples = len(soundfile.read(str(AUDIO))[0])
    assert len(calls) == -(-samples // 9600) > 1 and text
    assert [c[0] for c in calls[:-1]] == [9600] * (len(calls) - 1)
    assert len({c[1] for c in calls}) == 1                 # the same cache dict throughout
    assert [c[2] for c in calls] == [False] * (len(calls) - 1) + [True]
    assert all(c[3] == [0, 10, 5] for c in calls)


def test_campplus_embedding_needs_the_pooling_fix(model_dir, dml_device, assert_parity):
    """cam++ (the ``spk_model``) pools segments with ``F.avg_pool1d(x, 100, 100, ceil_mode=True)``
    (funasr/models/campplus/components.py): DirectML divides the last, shorter segment by
    the whole kernel (defect ``avg_pool_ceil``), so the embedding differs raw (max abs 0.0017
    on the emulator, within the ``device`` profile's atol; that defect's tests show it); with
    the shim it equals the CPU's. Its eval-mode batch norms are coerced too (``batch_norm_stats``:
    the saved statistics get the CPU's empty shape; the output is untouched); nothing else."""
    ref = speaker_embedding(model_dir, "cpu")
    dmlshim.activate()
    try:
        dmlshim.trace.reset()
        got = speaker_embedding(model_dir, dml_device)
        rows = dmlshim.report().rows
    finally:
        dmlshim.deactivate()
    assert ref.shape == (1, 192) and ref.dtype == torch.float32 and ref.abs().sum() > 0
    assert_parity(got, ref)
    assert {r["op"] for r in rows} == {"aten::avg_pool2d", "aten::native_batch_norm"}, rows


def test_example_script_speaker_labels(tmp_path, capsys, device_kind, profile):
    """--spk-model random adds cam++ (and a random VAD, which spk_model needs): speaker
    labels per sentence, equal to the CPU's; exit status 0."""
    try:
        status = funasr_transcribe.main([str(AUDIO), "--device", device_kind, "--compare-cpu",
                                         "--spk-model", "random", "--ncpu", "1",
                                         "--cache-dir", str(tmp_path)])
    finally:
        dmlshim.deactivate()
    out = capsys.readouterr().out
    assert status == 0, out
    assert "NOTE: the campplus model has random weights" in out
    assert "speaker per sentence: [" in out and f"within the '{profile}' profile" in out


@pytest.mark.parametrize("kind", ["sensevoice", "paraformer-streaming", "nano"])
def test_example_script_random_kind(kind, tmp_path, capsys, device_kind, profile):
    try:
        status = funasr_transcribe.main([str(AUDIO), "--device", device_kind, "--compare-cpu",
                                         "--model", f"random:{kind}", "--ncpu", "1",
                                         "--cache-dir", str(tmp_path)])
    finally:
        dmlshim.deactivate()
    out = capsys.readouterr().out
    assert status == 0, out
    assert f"--model random:{kind} is a {kind} model with RANDOM weights" in out
    assert f"within the '{profile}' profile" in out


@pytest.mark.parametrize("argv, message", [
    (["--model", "random:conformer"], "allowed random kinds are random:paraformer"),
    (["--model", "random:paraformer-streaming", "--spk-model", "random"],
     "streams chunk by chunk and takes no --spk-model"),
])
def test_example_script_rejects_bad_models(argv, message, capsys):
    with pytest.raises(SystemExit) as info:
        funasr_transcribe.parse_args(argv)
    assert info.value.code == 2
    assert message in capsys.readouterr().err


def test_without_shim_whisper_cannot_go_to_the_device(model_dir, dml_device):
    """openai-whisper's alignment_heads buffer is sparse; DirectML has no sparse kernels
    (failure_modes.md #30), so ``model.to(device)`` fails."""
    assert not dmlshim.is_active()
    with pytest.raises(NotImplementedError, match="Sparse"):
        load(model_dir, "whisper", dml_device)


def test_shim_runs_whisper_with_the_cpu_transcript(model_dir, dml_device, default_shim, profile):
    """With dmlshim the sparse buffer stays on the CPU as an island (dmlshim.islands) and
    the rest of Whisper runs on the device (float16, openai-whisper's default off the CPU):
    the transcript equals the CPU's.  The language token it detects on the device reaches
    its CPU token list through ``copy_to_cpu`` (#64: raw, the real binary decodes English)."""
    ref = transcribe(load(model_dir, "whisper", "cpu"), "whisper")
    got = transcribe(load(model_dir, "whisper", dml_device), "whisper")
    figures = parity.compare_transcripts(got["text"], ref["text"], None, None)
    assert figures.within(profile), f"{figures}\n  device: {got['text']}\n  cpu:    {ref['text']}"
    assert figures.tokens > 0


def test_random_whisper_has_initialised_text_positions(model_dir):
    """openai-whisper allocates its text positions with ``torch.empty`` for a checkpoint to
    fill. funasr_models fills them (normal, std 0.02); left empty they held whatever memory
    held: NaN logits, a transcript of "!"s, and a greedy decode whose length changed with
    the allocator's state (a CI run's device and CPU transcripts differed by 93 edits)."""
    weights = torch.load(model_dir("whisper") / "model.pt", map_location="cpu", weights_only=True)
    positions = weights["model.decoder.positional_embedding"]
    assert positions.isfinite().all() and 0.01 < float(positions.std()) < 0.03


def emotion_scores(model_dir, device):
    """emotion2vec's 9 utterance scores of AUDIO (labels, float64 list on the CPU side)."""
    res = load(model_dir, "emotion2vec", device).generate(
        str(AUDIO), granularity="utterance", extract_embedding=False)[0]
    return res["labels"], torch.tensor(res["scores"])


def test_emotion2vec_needs_no_fix(model_dir, dml_device, assert_parity):
    """emotion2vec uses only ops DirectML has: its scores equal the CPU's raw, and with
    the shim, which fixes nothing."""
    labels, ref = emotion_scores(model_dir, "cpu")
    _, raw = emotion_scores(model_dir, dml_device)
    dmlshim.activate()
    try:
        dmlshim.trace.reset()
        _, got = emotion_scores(model_dir, dml_device)
        rows = dmlshim.report().rows
    finally:
        dmlshim.deactivate()
    assert labels == funasr_models._EMOTIONS and ref.shape == (9,)
    assert abs(float(ref.sum()) - 1) < 1e-5          # a softmax over the 9 labels
    assert_parity(raw, ref)
    assert_parity(got, ref)
    # views of offset views remade from their anchor (offset_views, #62), zero-copy, are
    # the only interceptions: no computation is fixed
    assert [r for r in rows if set(r["actions"]) != {"anchored"}] == [], rows


def test_sensevoice_ctc_alignment_matches_cpu_with_the_shim(dml_device, default_shim, assert_same):
    """SenseVoice's timestamps: CTC forced alignment over random emissions, its gathers with
    dim=-1 (#43: the index read as arange on the real binary) and its in-place writes
    through views of views (#62), both fixed on the device."""
    from funasr.models.sense_voice.utils.ctc_alignment import ctc_forced_align
    g = torch.Generator().manual_seed(0)
    log_probs = torch.randn(2, 40, 12, generator=g).log_softmax(-1)
    targets = torch.randint(1, 12, (2, 6), generator=g)
    lengths = (torch.tensor([40, 33]), torch.tensor([6, 4]))
    want = ctc_forced_align(log_probs, targets.clone(), *lengths)
    got = ctc_forced_align(log_probs.to(dml_device), targets.to(dml_device), *(n.to(dml_device) for n in lengths))
    assert_same(got, want)                           # an integer path: exact on any device
    assert "aten::gather" in {r["op"] for r in dmlshim.report().rows}
