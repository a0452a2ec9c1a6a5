"""Device tensors without storage, as torch-directml's (rule ``"privateuseone.storage"``).

torch-directml 0.2.5 makes its tensors ``OpaqueTensorImpl`` s: they have no storage.
Measured on the real binary (torch 2.4.1; docs/emulation.md):

* ``t.data_ptr()`` raises ``RuntimeError: Cannot access data pointer of Tensor that
  doesn't have storage``;
* ``t.untyped_storage()`` and ``t.storage()`` raise ``NotImplementedError: Cannot access
  storage of OpaqueTensorImpl``;
* ``torch._C._has_storage(t)`` is False, so ``torch.save`` and ``copy.deepcopy`` take
  torch's paths for storage-less tensors (through NumPy, through ``clone``);
* ``torch.UntypedStorage(n, device=dml)`` (reached by ``torch.load(map_location=dml)``
  and ``UntypedStorage.to(device=dml)``) dereferences a null allocator: the process dies
  with SIGSEGV (rc 139).  Here it raises a ``RuntimeError`` instead, so a test process
  survives;
* ``torch.jit.load(f, map_location=dml)`` fails in the C++ loader with that
  ``NotImplementedError``.

The emulated device keeps real storage underneath (its kernels run on CPU aliases of
it).  While the default rule ``"privateuseone.storage"`` is configured, :func:`install`'s
accessors answer as the real binary's do (the rule's error and message for
``untyped_storage()``; its ``when`` is not consulted); without it the device has storage,
as a backend with an allocator does.  The emulator's own code reaches the storage
through the originals below.
"""
import torch

STORAGE_MESSAGE = "Cannot access storage of OpaqueTensorImpl"
DATA_PTR_MESSAGE = "Cannot access data pointer of Tensor that doesn't have storage"
RULE = "privateuseone.storage"
# torch's composites that clone their input through clone_preserve_strides, which asserts
# has_storage(): on the real 0.2.5 binary every call fails (benchmarks/fidelity_routing.py).
# They decompose before PrivateUse1, so the emulator gives them a kernel to fail in.
STRIDED_CLONES = ("slice_scatter", "select_scatter", "diagonal_scatter", "as_strided_scatter")
HAS_STORAGE_ASSERT = ('self.has_storage() INTERNAL ASSERT FAILED at "../aten/src/ATen/native/'
                      'TensorShape.cpp":3991, please report a bug to PyTorch. ')

# the configured rule RULE, or None (the device has storage); _state sets it
storage_rule = None

# the accessors of real storage, for the emulator's kernels
untyped_storage = torch._C.TensorBase.untyped_storage
data_ptr = torch._C.TensorBase.data_ptr
_has_storage = torch._C._has_storage
_new_storage = torch.UntypedStorage.__new__


def install(device_type: str) -> None:
    """Route the storage accessors through :data:`storage_rule` (once per process)."""
    def opaque(t) -> bool:
        return storage_rule is not None and isinstance(t, torch.Tensor) \
            and t.device.type == device_type

    def on_device(device) -> bool:
        return device is not None and torch.device(device).type == device_type

    def tensor_untyped_storage(self):
        if opaque(self):
            storage_rule.apply((self,), {})
        return untyped_storage(self)

    def tensor_data_ptr(self):
        if opaque(self):
            raise RuntimeError(DATA_PTR_MESSAGE)
        return data_ptr(self)

    def has_storage(t):
        return not opaque(t) and _has_storage(t)

    def new_storage(cls, *args, device=None, **kwargs):
        if not on_device(device):
            return _new_storage(cls, *args, **kwargs) if device is None \
                else _new_storage(cls, *args, device=device, **kwargs)
        if storage_rule is not None:
            # the real binary dies here (SIGSEGV): no allocator for its device type
            raise RuntimeError(
                f"torch.UntypedStorage(..., device={str(device)!r}): torch-directml's tensors "
                "have no storage (OpaqueTensorImpl); on the real binary this call dies with "
                "SIGSEGV (dmlshim.emulation raises instead)")
        # with storage: allocated through a tensor (the Python binding registers no
        # allocator); from a sequence of bytes, through the CPU
        if args and not isinstance(args[0], int):
            return _new_storage(cls, *args, **kwargs).to(device=torch.device(device))
        return untyped_storage(torch.empty(args[0] if args else 0, dtype=torch.uint8, device=device))

    def jit_loader(load):
        def import_ir(cu, f, map_location, *args):
            if storage_rule is not None and on_device(map_location):
                storage_rule.apply((), {})
            return load(cu, f, map_location, *args)
        return import_ir

    for name in ("import_ir_module", "import_ir_module_from_buffer"):
        setattr(torch._C, name, jit_loader(getattr(torch._C, name)))
    torch.Tensor.untyped_storage = tensor_untyped_storage
    torch.Tensor.data_ptr = tensor_data_ptr
    torch._C._has_storage = has_storage
    torch.UntypedStorage.__new__ = new_storage


def set_rule(rules) -> None:
    """Take the first rule named :data:`RULE` of ``rules`` (a configuration's), or None."""
    global storage_rule
    storage_rule = next((r for r in rules if isinstance(r.op, (str, tuple)) and r.op != "*"
                         and r.matches_op(None, RULE, False)), None)   # named, not "every op"
