"""LSTM and GRU run on the CPU, however they are reached.

On torch-directml 0.2.5 every LSTM fails: ``aten::lstm`` decomposes into
``_thnn_fused_lstm_cell``, which has neither a DirectML nor a CPU kernel
(``NotImplementedError``; DirectML#613, #654, #677; failure_modes.md #1); GRU
(``_thnn_fused_gru_cell``) fails the same way (#2), in TorchScript too (#49).  Plain
``nn.RNN`` decomposes into ops DirectML has and stays on the device.

Kernels at the target's Autograd and backend keys (as ``dispatcher.COMPOSITES``) run
``aten::lstm``/``gru`` (both overloads), ``lstm_cell``/``gru_cell`` and the fused cells on
the CPU: for ``nn.LSTM`` & co., TorchScript, ``torch.ops.aten``, in ``inference_mode``
and with autograd.  Weights come from a cache of CPU copies, refreshed only when a
weight changes; gradients flow back to the device.  See docs/rnn.md.
"""
from __future__ import annotations

import functools
import operator
import threading
import warnings
import weakref
from typing import Dict, Optional, Tuple

import torch

from .. import _torch_compat, fallback, trace
from . import _opmath
from ._wrap import Context
from .dispatcher import backend_key
from ._patch import Patch

PATCH = Patch("rnn", "LSTM/GRU have no DirectML or CPU kernel (_thnn_fused_*_cell): aten::lstm/gru/"
                     "*_cell run on the CPU with cached CPU weights however reached (nn modules, "
                     "TorchScript, torch.ops.aten; AutogradPrivateUse1 + PrivateUse1 kernels) "
                     "(DirectML#613, #654, #677; failure_modes.md #1, #2, #49)")

_library: Optional[torch.library.Library] = None
_aten = torch.ops.aten


class _CachedToCPU(torch.autograd.Function):
    """Forward ``(cpu_copies, *weights)``: the cached CPU copies, detached (a new tensor
    each: an input returned as it is would be made a view by ``Tensor.view_as``, a Python
    call per weight).  Backward: each gradient moved to its weight's device.  One node
    for all the weights of a call."""

    @staticmethod
    def forward(ctx, copies, *weights):
        ctx.devices = list(map(_device, weights))
        ctx.set_materialize_grads(False)
        return tuple(map(_detach, copies))

    @staticmethod
    def backward(ctx, *grads):
        return (None, *(None if g is None else g.to(d) for g, d in zip(grads, ctx.devices)))


_device = operator.attrgetter("device")
_detach = torch._C.TensorBase.detach


class WeightCache:
    """CPU copies of device weights, keyed by the weight object, held weakly."""

    def __init__(self):
        self._lock = threading.Lock()
        self._entries: Dict[int, list] = {}    # id(weight) -> [weakref, key, cpu copy]

    @staticmethod
    def _key(w: torch.Tensor) -> tuple:
        # torch-directml's tensors have no storage (OpaqueTensorImpl: data_ptr() and
        # untyped_storage() raise), so there the version counter alone shows a change:
        # a `.data =` swap to a same-shaped tensor, or an inference tensor changed in
        # place inside inference mode, is not seen (docs/rnn.md)
        ptr = w.data_ptr() if _torch_compat.has_storage(w) else None
        # inference tensors have no version counter (and cannot change outside
        # inference mode): the data pointer alone identifies them
        version = None if w.is_inference() else w._version
        return version, ptr, tuple(w.shape), w.dtype

    def cpu(self, w: torch.Tensor) -> torch.Tensor:
        """The CPU copy of ``w`` (refreshed if ``w`` changed), differentiable to ``w``
        when autograd needs it."""
        return self.cpus([w])[0]

    def cpus(self, weights: list) -> list:
        """:meth:`cpu` of each of ``weights`` (None and CPU tensors as they are), in one
        Python call while none changed: one ``_CachedToCPU`` node carries the gradients
        of those autograd needs."""
        copies = list(weights)
        grads = torch.is_grad_enabled()
        needing, needed, held = [], [], []   # the weights autograd needs, positions, copies
        entries = self._entries
        # read per call: torch-directml (and the emulator, which installs one) replaces it
        has_storage = getattr(torch._C, "_has_storage", None) or _torch_compat.has_storage
        for i, w in enumerate(weights):
            if w is None or w.is_cpu:
                continue
            # _key's, inline (the loop runs on every call)
            key = (None if w.is_inference() else w._version, w.data_ptr() if has_storage(w) else None,
                   tuple(w.shape), w.dtype)
            entry = entries.get(id(w))
            if entry is None or entry[0]() is not w or entry[1] != key:
                entry = self._refresh(w)
            copies[i] = entry[2]
            if grads and w.requires_grad:
                needing.append(w)
                needed.append(i)
                held.append(entry[2])
        if needing:
            for i, copy in zip(needed, _CachedToCPU.apply(held, *needing)):
                copies[i] = copy
        return copies

    def _refresh(self, w: torch.Tensor) -> list:
        """A new entry for ``w``: its key and CPU copy."""
        key = self._key(w)
        # a normal tensor even inside inference_mode: the copy outlives this call
        # and may be used by autograd later
        with fallback.guard(), torch.inference_mode(False), torch.no_grad():
            copy = w.detach().to("cpu")
        trace.moved(d2h=trace.nbytes(w))
        wid = id(w)
        ref = weakref.ref(w, lambda _r, wid=wid: self._forget(wid, _r))
        entry = [ref, key, copy]
        with self._lock:
            self._entries[wid] = entry
        return entry

    def _forget(self, wid: int, ref) -> None:
        with self._lock:
            entry = self._entries.get(wid)
            if entry is not None and entry[0] is ref:
                del self._entries[wid]

    def size(self) -> Tuple[int, int]:
        """(tensors, bytes) held."""
        with self._lock:
            copies = [e[2] for e in self._entries.values()]
        return len(copies), sum(trace.nbytes(c) for c in copies)

    def clear(self) -> None:
        with self._lock:
            self._entries.clear()


cache = WeightCache()


# CompositeImplicitAutograd RNN overloads -> positions of their weight arguments:
# ``lstm``/``gru`` ``(input, hx, params, ...)`` and the PackedSequence overload ``(data,
# batch_sizes, hx, params, ...)``; the cells ``(input, hx, w_ih, w_hh, b_ih, b_hh)``
_WEIGHTS = {_aten.lstm.input: (2,), _aten.lstm.data: (3,), _aten.gru.input: (2,),
            _aten.gru.data: (3,), _aten.lstm_cell.default: (2, 3, 4, 5),
            _aten.gru_cell.default: (2, 3, 4, 5)}


def _cached(a):
    """A weight argument (a tensor, a list of them, or None) with CPU copies from ``cache``."""
    if isinstance(a, (list, tuple)):
        return [cache.cpu(w) for w in a]
    return cache.cpu(a) if isinstance(a, torch.Tensor) else a


def _in_opmath(cell):
    """``cell`` computed in opmath (float32 for float16/bfloat16 gates) and each result
    rounded once to the gates' dtype, as CUDA's fused kernels compute in ``accscalar_t``."""
    def wide(t):
        return _opmath.wide(t) if isinstance(t, torch.Tensor) else t

    @functools.wraps(cell)
    def wide_cell(*args, **kwargs):
        dtype = next(t.dtype for t in (*args, *kwargs.values()) if isinstance(t, torch.Tensor))
        results = cell(*map(wide, args), **{k: wide(v) for k, v in kwargs.items()})
        return tuple(r.to(dtype) for r in results)
    return wide_cell


@_in_opmath
def _fused_lstm_cell(input_gates, hidden_gates, cx, input_bias=None, hidden_bias=None):
    """``aten::_thnn_fused_lstm_cell`` from CPU ops, in the CUDA kernel's order
    (aten/src/ATen/native/cuda/RNN.cu).  Gates (B, 4H) in the order i, f, g, o; cx (B, H).
    Returns (hy, cy, workspace): the workspace holds the activated gates, as CUDA's."""
    gates = input_gates + hidden_gates
    if input_bias is not None:
        gates = gates + input_bias + hidden_bias
    i, f, g, o = gates.chunk(4, 1)
    i, f, g, o = i.sigmoid(), f.sigmoid(), g.tanh(), o.sigmoid()
    cy = f * cx + i * g
    return o * cy.tanh(), cy, torch.cat((i, f, g, o), 1)


@_in_opmath
def _fused_gru_cell(input_gates, hidden_gates, hx, input_bias=None, hidden_bias=None):
    """``aten::_thnn_fused_gru_cell`` from CPU ops, in the order of the CPU ``GRUCell``
    (aten/src/ATen/native/RNN.cpp).  Gates (B, 3H) in the order r, z, n; hx (B, H).
    Returns (hy, workspace (B, 5H): r, z, n, hx, hidden n-gate with its bias, as CUDA's)."""
    if input_bias is not None:
        input_gates = input_gates + input_bias
    if hidden_bias is not None:
        hidden_gates = hidden_gates + hidden_bias
    ir, iz, in_ = input_gates.chunk(3, 1)
    hr, hz, hn = hidden_gates.chunk(3, 1)
    r, z = (hr + ir).sigmoid(), (hz + iz).sigmoid()
    n = (in_ + hn * r).tanh()
    return (hx - n) * z + n, torch.cat((r, z, n, hx, hn), 1)


# the fused cells: no DirectML and no CPU kernel (CPU_FALLBACK_NO_CPU_KERNEL), reached by
# torch.ops.aten calls or C++ code below the composites above
_FUSED = {_aten._thnn_fused_lstm_cell.default: _fused_lstm_cell,
          _aten._thnn_fused_gru_cell.default: _fused_gru_cell}


def _kernel(op, target: str):
    """A kernel that runs ``op`` on the CPU (weights from ``cache``) and brings its
    results back to the device; differentiable, so it serves the Autograd key too."""
    name = op.name()                              # "aten::lstm.input"
    func, slots = _FUSED.get(op, op), _WEIGHTS.get(op, ())

    def generic(func, args, kwargs):
        device = fallback.device_of(args, kwargs, target)
        with trace.substitute():                # the CPU run, its weights' copies included
            with fallback.guard():              # weights from the cache, the rest by run_on_cpu
                args = tuple(_cached(a) if i in slots else a for i, a in enumerate(args))
            return "cpu", fallback.run_on_cpu(func, args, kwargs, device=device, op=name)

    def run(args):
        """``func`` on the CPU, as ``fallback.run_on_cpu`` runs it, in a few Python calls: the
        arguments' structure is known (tensors, lists of them, numbers; none written, no
        view returned), so plain loops stand for tree_map, one ``cache.cpus`` call gives
        the weights, and two ``fallback.copy_all`` calls move the rest there and the
        results back (past the BackendSelect kernels, which pass the shim's copies by)."""
        device = other = None               # the first target / other non-CPU tensor's device
        cpu_args = list(args)
        moving, spots, weights, places = [], [], [], []    # tensors, their (list, index)
        for i, a in enumerate(args):
            if isinstance(a, torch.Tensor):
                holder, items, first = cpu_args, (a,), i
            elif isinstance(a, (list, tuple)):
                holder = items = cpu_args[i] = list(a)
                first = 0
            else:
                continue
            for j, t in enumerate(items, first):
                if not isinstance(t, torch.Tensor):
                    continue
                if i in slots:
                    weights.append(t)
                    places.append((holder, j))
                if t.is_cpu:
                    continue
                if i not in slots:
                    moving.append(t)
                    spots.append((holder, j))
                if device is None:
                    if t.device.type == target:
                        device = t.device
                    elif other is None:
                        other = t.device
        if weights:
            for (holder, j), copy in zip(places, cache.cpus(weights)):
                holder[j] = copy
        d2h = fallback.copy_all(moving, _CPU) if moving else 0
        for (holder, j), copy in zip(spots, moving):
            holder[j] = copy
        with fallback.guard():
            out = func(*cpu_args)
        device = device or other
        h2d = 0
        if device is not None:
            results = list(out) if type(out) is tuple else [out]
            back, spots = [], []
            for j, r in enumerate(results):
                if isinstance(r, torch.Tensor) and r.is_cpu:
                    back.append(r)
                    spots.append(j)
            h2d = fallback.copy_all(back, device)
            for j, r in zip(spots, back):
                results[j] = r
            out = tuple(results) if type(out) is tuple else results[0]
        trace.moved(h2d=h2d, d2h=d2h)
        return out

    def handle(func, args, kwargs):
        if kwargs:                              # by name (no caller seen does): the generic path
            return generic(func, args, kwargs)
        return "cpu", trace.region(True, run, args)   # the CPU run, its copies included

    def kernel(*args, **kwargs):
        return trace.call(name, handle, func, args, kwargs)
    return kernel


_CPU = torch.device("cpu")


def _register(target: str) -> None:
    """Kernels for ``_WEIGHTS`` and ``_FUSED`` at the target's Autograd key and backend
    key, as ``dispatcher.COMPOSITES``: the Autograd key for calls with autograd (the
    CPU ops record the graph; ``.to()`` and ``_CachedToCPU`` carry gradients back), the
    backend key for ``inference_mode`` (no Autograd keys) and calls made below Autograd.
    torch-directml has no kernel of the composites; ours replace its fused-cell entry
    (a CPU fallback without a CPU kernel) while active."""
    global _library
    backend = backend_key(target)
    if _library is not None or backend is None:
        return
    library = torch.library.Library("aten", "IMPL")
    for op in (*_WEIGHTS, *_FUSED):
        kernel = _kernel(op, target)
        for key in ("Autograd" + backend.name, backend.name):
            try:
                with warnings.catch_warnings():
                    warnings.filterwarnings("ignore", "(?s).*Overriding a previously registered kernel")
                    library.impl(op.name().split("::", 1)[1], kernel, key)
            except RuntimeError:
                # torch refuses a second Python kernel at one key: the emulated device
                # gives an op it has met (a fused cell) one of its own.  The Autograd
                # key still serves the calls made with autograd.
                if key != backend.name or op not in _FUSED:
                    _torch_compat.destroy_library(library)          # nothing half-installed
                    raise
    _library = library


def install(ctx: Context) -> None:
    _register(ctx.target)
    trace.register_cache("rnn CPU weights", cache.size)


def uninstall() -> None:
    global _library
    library, _library = _library, None
    if library is not None:
        _torch_compat.destroy_library(library)                      # removes the kernels from the dispatcher
    cache.clear()                           # deactivate() frees the CPU copies
