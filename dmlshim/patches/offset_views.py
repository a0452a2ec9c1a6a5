"""Views of a view with a storage offset are copies on DirectML: writes through them are lost.

torch-directml 0.2.5 keeps a view's offset inside its own tensor (``storage_offset()``
reads 0 on the real binary), and its view kernels (``as_strided``, ``view``,
``_reshape_alias``, ``_unsafe_view``, ``reshape``) given a tensor with such an offset and
no further offset return a *snapshot*: the right values, but an in-place op on it does not
reach the base, and a later change of the base does not reach it.  ``x[1:].t()``,
``x[1:][0:2]``, ``x[2][0:4]`` and ``x[1:][:, 4:8]`` (whose full first-dimension slice is such a
call) are snapshots; ``x[1:][1:3]`` aliases.  ``split``/``chunk`` always return copies.
Measured on the real binary (failure_modes.md #62; docs/defects.md); SeACo-Paraformer's
hotword LSTM (``pad_packed_sequence``) and RealESRGANer's tiles write that way.

The fix: dmlshim records, on each view it sees made on the device, the tensor it aliases
(its *anchor*, one with no offset of its own) and its offset there, in elements; a view op
of a tensor with an offset, and every ``split``, is then made as ``anchor.as_strided(size,
stride, offset)``, which aliases, its geometry computed on the meta device.  A view made
before ``activate()`` or by ``.data`` is not known and keeps DirectML's behaviour.  An
``as_strided`` offset stays relative to the view, as torch-directml reads it (the CPU's is
absolute; ``storage_offset()`` reads 0 there, so code that adds it gets the same answer).
"""
from __future__ import annotations

import functools
from typing import Tuple

import torch

from .. import trace
from ..dml_ops import aten_op, view_kernels
from . import _gate, _select
from .dispatcher import Done
from ._patch import Patch

PATCH = Patch("offset_views", "views of a view with an offset, and split's chunks, are copies: writes "
                              "through them are lost (measured on the real 0.2.5 binary; #62): made from "
                              "the tensor they alias with as_strided, on the device",
              # both hold the view kernels, and this one makes its views through the rest of their
              # chain (_select.pass_on)
              before=("inference_mode",))

_aten = torch.ops.aten
_AS_STRIDED = _aten.as_strided.default
# where a view's anchor and offset are kept: on the tensor's Python object, which torch
# keeps with the TensorImpl (PyObject preservation), so it survives a trip through C++
_KEY = _gate.ANCHOR
# of torch-directml's view kernels (dml_ops.view_kernels, the one list: inference_mode's
# too), the split kernels, which copy every chunk (a list of views comes back)
_SPLITS = (_aten.split.Tensor, _aten.split_with_sizes.default)


def anchor_of(t: torch.Tensor) -> Tuple[torch.Tensor, int]:
    """``(anchor, offset)``: the tensor ``t`` aliases and ``t``'s offset there, in elements;
    ``(t, 0)`` for a tensor dmlshim saw no view op make.  A view the compiled gate made at an
    offset (``as_strided`` of a tensor with none, in C++) has the gate's record: its ``self``
    as anchor, held weakly there, or where that has gone, the view's base."""
    kept = getattr(t, _KEY, None)
    if kept:
        return kept
    anchor, offset = _gate.anchored(t)
    anchor = anchor if anchor is not None else t._base
    return (anchor, offset) if offset and anchor is not None else (t, 0)


def _remember(results, anchor: torch.Tensor, offsets) -> None:
    for t, offset in zip(results, offsets):
        if offset:
            setattr(t, _KEY, (anchor, offset))
            _gate.mark_anchored(t, anchor, offset)   # its view ops go to Python (the gate's watch)


def _meta_geometry(op, args, kwargs):
    """``[(size, stride, offset)]`` of ``op``'s results, computed on the meta device for a
    ``self`` of offset 0; None if they are not views there (``reshape`` copying) or the
    call is not valid (the device then gives its own error).  Kept per geometry and
    arguments (a model splits the same shapes every step: the meta call costs about 50 us);
    a call with a tensor or symbolic argument is computed each time."""
    self = args[0]
    shape, stride, dtype = tuple(self.shape), self.stride(), self.dtype
    try:
        rest, named = _frozen(args[1:]), _frozen(sorted(kwargs.items()))
    except TypeError:
        return _geometry.__wrapped__(op, dtype, shape, stride, args[1:], tuple(kwargs.items()))
    return _geometry(op, dtype, shape, stride, rest, named)


def _frozen(value):
    """``value`` as a key: numbers, None, str, dtypes and memory formats as they are, lists and
    tuples as tuples; TypeError for anything else (a tensor, a SymInt)."""
    if isinstance(value, (list, tuple)):
        return tuple(_frozen(v) for v in value)
    if value is None or type(value) in (int, float, bool, str, torch.dtype, torch.memory_format):
        return value
    raise TypeError(f"no key for {type(value).__name__}")


@functools.lru_cache(maxsize=4096)
def _geometry(op, dtype, shape, stride, rest, named):
    """:func:`_meta_geometry` of a ``self`` of this dtype, shape and stride; ``rest`` the
    other positional arguments, ``named`` the keyword ones as ``(name, value)`` pairs."""
    meta = torch.empty_strided(shape, stride, dtype=dtype, device="meta")
    try:
        out = op(meta, *rest, **dict(named))
    except (RuntimeError, TypeError, ValueError):
        return None
    outs = out if isinstance(out, (list, tuple)) else (out,)
    storage = meta.untyped_storage()._cdata
    if not all(o.untyped_storage()._cdata == storage for o in outs):
        return None
    return tuple((o.shape, o.stride(), o.storage_offset()) for o in outs)


def _as_strided_delta(args, kwargs) -> int:
    """as_strided's offset relative to ``self``: torch's composites pass
    ``self.storage_offset() + delta`` (0 + delta on DirectML, the true offset on the emulator,
    whose storage_offset() is right)."""
    self = args[0]
    offset = args[3] if len(args) > 3 else kwargs.get("storage_offset")
    return 0 if offset is None else int(offset) - self.storage_offset()


@_gate.at_backend
@_gate.watching(lambda op: _gate.ALWAYS if op in _SPLITS else _gate.Watch(view=True))
def _rebuilt(op, keyset, args, kwargs):
    """The fix: a view op of a tensor with an offset, and every split, from the anchor."""
    self = args[0]
    anchor, base = anchor_of(self)
    if op is _AS_STRIDED:
        delta = _as_strided_delta(args, kwargs)
        if not base:
            if not delta:
                return None                          # the hot path: a view of a root
            # DirectML's view aliases (an offset of its own): remembered for views of it
            result = _select.pass_on(op, keyset, args, kwargs, after=_rebuilt)
            _remember((result,), self, (delta,))
            return Done(result, record=False)
        geometry = [(args[1], args[2], delta)]
    elif base or op in _SPLITS:
        geometry = _meta_geometry(op, args, kwargs)
        if geometry is None:
            return None
    else:
        return None                                  # offset 0: DirectML's view aliases
    offsets = [base + delta for _, _, delta in geometry]
    # its own action: a view remade, zero-copy, is no computation fixed; the views themselves
    # are the call's own time (pass_on's redispatch), the rest overhead
    call = trace.begin()
    try:
        views = [_view_of(anchor, keyset, size, stride, offset)
                 for (size, stride, _), offset in zip(geometry, offsets)]
        _remember(views, anchor, offsets)
    finally:
        trace.end(call, op.name(), "anchored", args, kwargs)
    return Done(views if op in _SPLITS else views[0], record=False)


def _view_of(anchor, keyset, size, stride, offset) -> torch.Tensor:
    """``anchor.as_strided(size, stride, offset)`` through the rest of as_strided's fixes
    (inference_mode's); an offset relative to the anchor, whatever its storage_offset()."""
    args = (anchor, list(size), list(stride), anchor.storage_offset() + offset)
    return _select.pass_on(_AS_STRIDED, keyset, args, {}, after=_rebuilt)


# every view kernel snapshots an offset view (as_strided and the splits among them)
_kernels = _select.Kernels(__name__, {aten_op(name): _rebuilt for name in view_kernels()})
install, uninstall = _kernels.install, _kernels.uninstall
