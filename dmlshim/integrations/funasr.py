"""funasr's CTC prefix scorer takes every non-CUDA tensor for a CPU tensor.

``CTCPrefixScoreTH.__init__`` (funasr 1.4.16, ``models/transformer/scorers/
ctc_prefix_score.py:41``) sets ``self.device`` to ``cuda:N`` for CUDA input and to
``cpu`` for anything else, then builds its index tensors and, on every call, its
forward-probability tensors there. With DirectML posteriors the scorer mixes CPU and
device tensors and fails ("Expected all tensors to be on the same device"). It is the
batched CTC scorer of CTC/attention beam search (``CTCPrefixScorer.batch_init_state``,
espnet-style RNN decoders).

Fix: after ``__init__``, the scorer's device is the input's device and the index
tensors it made move there; CPU and CUDA input are left untouched. Docs:
docs/fun-asr-nano.md.
"""
from __future__ import annotations

from ..patches._wrap import Context, PatchSet
from ..patches._patch import Patch

PATCH = Patch("funasr", "funasr's CTC prefix scorer (CTCPrefixScoreTH) takes every non-CUDA tensor for a "
                        "CPU tensor: device mismatch on DirectML with decoding_ctc_weight > 0 (issue 20)",
              imports=("funasr",))

_patches = PatchSet(__name__)
_SCORER = "funasr.models.transformer.scorers.ctc_prefix_score"


def scorer_on_input_device(wrapped, instance, args, kwargs):
    """wrapt wrapper of ``CTCPrefixScoreTH.__init__(x, xlens, blank, eos, margin=0)``:
    ``x`` (B, T, O) float log-posteriors decide ``instance.device``."""
    wrapped(*args, **kwargs)
    x = args[0] if args else kwargs["x"]
    if instance.device != x.device:
        instance.device = x.device
        for name in ("idx_b", "idx_bo", "frame_ids"):    # made on the wrong device above
            if getattr(instance, name, None) is not None:
                setattr(instance, name, getattr(instance, name).to(x.device))


def install(ctx: Context) -> None:
    _patches.wrap(ctx, _SCORER, "CTCPrefixScoreTH.__init__", scorer_on_input_device)


def uninstall() -> None:
    _patches.restore()
