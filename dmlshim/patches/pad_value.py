"""``constant_pad_nd`` on the real torch-directml 0.2.5 binary keeps the pad value of its
first call per input shape, pads and dtype: ``F.pad(x, (1, 1), value=1.0)`` then
``value=2.0`` pads with 1.0 both times (an operator cache keyed without the value,
measured; OpInfo's samples with value 2.0 after those with 1.0).  And an empty input is
refused (``m_device->CreateOperator``).  The fix pads with 0 only, so every call it makes
agrees with the cache, and writes a value other than 0 where the padded mask is False
(``masked_fill``), on the device; an empty input runs on the CPU (nothing to compute).
No public report (docs/conformance.md).
"""
from __future__ import annotations

import torch

from .. import ranges, trace
from ..laws import integers
from . import _select
from .dispatcher import Done, below
from ._patch import Patch

PATCH = Patch("pad_value", "constant_pad_nd keeps the pad value of its first call per shape, pads and dtype, "
                           "refuses an empty input (measured on the real 0.2.5 binary): padded with 0, the value "
                           "by masked_fill, on the device; an empty input on the CPU",
              # pad_negative hands its cropped call of mixed signs on to it (_select.pass_on);
              # pad_zero answers every pad of 0s first (this one's own pad of 0s would be that call)
              after=("pad_negative", "pad_zero"))

_aten = torch.ops.aten


def _value_kept(op, keyset, args, kwargs):
    x, pad = args[0], args[1]
    value = args[2] if len(args) > 2 else kwargs.get("value", 0)
    if x.numel() == 0:
        return _select.on_cpu(op, args, kwargs)
    if value == 0:                    # what every call the fix makes pads with: nothing to do
        return None
    padded = _select.itself(op, keyset, x, pad, 0)
    with trace.substitute():                      # where the value goes, another pad
        inside = op.redispatch(below(keyset), torch.ones_like(x, dtype=torch.bool), pad, 0)
    span = ranges.known_span(x)          # integer ids padded with an id keep a range, no read
    ranges.remember(padded, integers.union([span, (0, 0)]))
    result = padded.masked_fill(inside.logical_not(), value)
    if float(value).is_integer():
        ranges.remember(result, integers.union([span, (int(value), int(value))]))
    return Done(result)


_kernels = _select.Kernels(__name__, {_aten.constant_pad_nd.default: _value_kept})
install, uninstall = _kernels.install, _kernels.uninstall
