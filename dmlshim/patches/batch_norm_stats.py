"""``native_batch_norm``'s saved statistics have other shapes on the real torch-directml 0.2.5
binary: in eval mode it returns the running mean and variance as ``save_mean``/``save_invstd``
(the CPU: empty tensors), and with one channel in training a 0-dim mean and invstd (the CPU:
shape ``[1]``); ``native_batch_norm_backward`` returns 0-dim weight and bias gradients for one
channel, which autograd refuses ("invalid gradient at index 1 - got [] but expected shape
compatible with [1]").  The normalized output and the input's gradient are right, and the
backward takes the CPU's saved statistics (empty in eval, ``[1]``) with the same results.
Measured with OpInfo's ``native_batch_norm`` samples and ``F.batch_norm``.  Fixed on the
device: the statistics and gradients given the CPU's shapes.  No public report.
"""
from __future__ import annotations

import torch

from . import _select
from .dispatcher import Done
from ._patch import Patch

PATCH = Patch("batch_norm_stats", "native_batch_norm's saved statistics (eval mode, one channel) and its "
                                  "backward's one-channel gradients have other shapes (measured on the real "
                                  "0.2.5 binary): the CPU's shapes, on the device")

_aten = torch.ops.aten


def _training(args, kwargs):
    return args[5] if len(args) > 5 else kwargs["training"]


def _saved(op, keyset, args, kwargs):
    output, mean, invstd = _select.itself(op, keyset, *args, **kwargs)
    if not _training(args, kwargs):
        mean, invstd = mean.new_empty(0), invstd.new_empty(0)
    elif mean.dim() == 0:
        mean, invstd = mean.reshape(1), invstd.reshape(1)
    return Done((output, mean, invstd))


def _gradients(op, keyset, args, kwargs):
    channels = (args[1] if len(args) > 1 else kwargs["input"]).shape[1:2]
    grads = _select.itself(op, keyset, *args, **kwargs)
    return Done(tuple(g.reshape(channels) if i and g is not None and g.dim() == 0 else g
                      for i, g in enumerate(grads)))


_kernels = _select.Kernels(__name__, {_aten.native_batch_norm.default: _saved,
                            _aten.native_batch_norm_backward.default: _gradients})
install, uninstall = _kernels.install, _kernels.uninstall
