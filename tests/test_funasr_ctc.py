"""CTC-weighted decoding in funasr on the DirectML device (issue 20).

Two parts of funasr 1.4.16 meet DirectML here:

* ``CTCPrefixScoreTH`` (``models/transformer/scorers/ctc_prefix_score.py:41``), the
  batched CTC prefix scorer, builds its tensors on the CPU for any non-CUDA input:
  device mismatch on DirectML. dmlshim's ``funasr`` patch gives it the input's device.
* Paraformer's CTC/attention beam search (``decoding_ctc_weight > 0``) appends each
  token with ``torch.tensor([zero_dim_tensor])`` (``paraformer/search.py:148``): a
  Python ``Tensor.__getitem__`` wrapper would break that on every device, so the
  auto-fallback patch leaves ``__getitem__`` alone.
"""
import pytest
import torch

import dmlshim
from dmlshim import errors, parity

import funasr_models
import funasr_transcribe

AUDIO = funasr_transcribe.SAMPLES[0]
T, D, V, SOS, EOS = 40, 16, 12, 1, 2


def greedy_ctc_prefix(device, steps=4):
    """Greedy search on CTC prefix scores alone: (steps, V) float32 scores on the CPU.

    A random funasr CTC head over random encoder output, scored with the batched
    scorer the way funasr's batch beam search drives it (``batch_init_state``, then
    ``impl(y, state)`` and ``index_select_state`` per step).
    """
    from funasr.models.ctc.ctc import CTC
    from funasr.models.transformer.scorers.ctc import CTCPrefixScorer

    gen = torch.Generator().manual_seed(0)
    ctc = CTC(odim=V, encoder_output_size=D)
    with torch.no_grad():
        for p in ctc.parameters():
            p.copy_(torch.randn(p.shape, generator=gen))
    enc = torch.randn(T, D, generator=gen)
    ctc, enc = ctc.to(device), enc.to(device)
    scorer = CTCPrefixScorer(ctc=ctc, eos=EOS)
    scorer.batch_init_state(enc)
    y, state, rows = torch.tensor([SOS], device=device), None, []
    for _ in range(steps):
        scores, full_state = scorer.impl([y], state)             # (1, V)
        best = scores[0, 3:].argmax().view(1, 1) + 3             # skip blank, sos, eos
        state = scorer.impl.index_select_state(full_state, best)
        y = torch.cat([y, best.view(1)])
        rows.append(scores[0].cpu())
    return torch.stack(rows)


def test_ctc_prefix_scorer_fails_raw_on_the_device(dml_device):
    # the emulator: the CPU tensors meet the device's first; the real 0.2.5 binary refuses
    # the 5-D repeat (failure_modes.md #61) before that
    assert not dmlshim.is_active()
    with pytest.raises(RuntimeError, match="device|must be 4 or lower, but got 5"):
        greedy_ctc_prefix(dml_device)


def test_ctc_prefix_scorer_runs_on_the_device_with_the_shim(dml_device, default_shim, assert_parity):
    ref = greedy_ctc_prefix("cpu")
    dmlshim.trace.reset()
    got = greedy_ctc_prefix(dml_device)
    assert ref.shape == (4, V) and torch.isfinite(ref[:, 3:]).all()
    assert_parity(got, ref)
    # on the device itself: nothing went to the CPU and back
    assert not any("cpu" in r["actions"] for r in dmlshim.report().rows), dmlshim.report()


@pytest.fixture(scope="module")
def ctc_paraformer(tmp_path_factory):
    """The tiny random Paraformer with a CTC head (``ctc_weight: 0.3``)."""
    real = funasr_models._asr_config

    def with_ctc(kind, size, vocab_size):
        conf = real(kind, size, vocab_size)
        conf["model_conf"]["ctc_weight"] = 0.3
        return conf

    path = tmp_path_factory.mktemp("ctc_paraformer")
    mp = pytest.MonkeyPatch()
    mp.setattr(funasr_models, "_asr_config", with_ctc)
    try:
        funasr_models.write_model_dir(path, "paraformer")
    finally:
        mp.undo()
    return path


def ctc_decode(model_dir, device):
    threads = torch.get_num_threads()
    try:
        model = funasr_models.auto_model(model_dir, device, 1)
        return model.generate(str(AUDIO), decoding_ctc_weight=0.3, beam_size=2)[0]["text"]
    finally:
        torch.set_num_threads(threads)


def test_ctc_weighted_paraformer_fails_raw_on_the_device(ctc_paraformer, dml_device):
    assert not dmlshim.is_active()
    with pytest.raises(RuntimeError) as info:
        ctc_decode(ctc_paraformer, dml_device)
    assert errors.recognise(str(info.value)) is errors.E_INVALIDARG    # either rendering


def test_ctc_weighted_paraformer_matches_cpu_with_the_shim(ctc_paraformer, dml_device,
                                                          default_shim, profile):
    """Beam search with CTC weight 0.3: the CPU (shim active: it must change nothing
    there) and the device give the same text as the CPU without the shim."""
    dmlshim.deactivate()
    ref = ctc_decode(ctc_paraformer, "cpu")
    dmlshim.activate()
    assert ctc_decode(ctc_paraformer, "cpu") == ref
    got = ctc_decode(ctc_paraformer, dml_device)
    figures = parity.compare_transcripts(got, ref, None, None)
    assert figures.within(profile) and figures.tokens > 10, f"{figures}\n{got}\n{ref}"
