"""The emulated device bound through a C++ extension (the default on every torch).

torch 2.4.1, torch-directml's pin, has no Python PrivateUse1 backend API, so ``csrc/device.cpp``
registers the allocator, hooks, device guard and a boxed fallback in C++, and
gives zero-copy aliases between the CPU and the device (``at::from_blob``).
The routing and quirk policy stays in Python: on an op's first call the C++
fallback asks :func:`setup`'s ``take_op`` to register a Python kernel for it,
then redispatches to that kernel.

The extension is compiled on first use with ``torch.utils.cpp_extension``
(about 30 s with g++ 12 and ninja) and cached under ``TORCH_EXTENSIONS_DIR``
(default ``~/.cache/torch_extensions``), keyed by the source's hash.
"""
import functools
import os

import torch

from .. import cpp_build
from ..cpp_build import STALE_LOCK_S, _remove_stale_lock, missing_tools  # noqa: F401  (tests)

NAME = "compiled"
SOURCE = os.path.join(os.path.dirname(os.path.abspath(__file__)), "csrc", "device.cpp")


def missing() -> list:
    """What building the extension needs and this machine lacks; nothing where a build of
    this source for this torch exists (prebuilt or in the build cache)."""
    return [] if cpp_build.exists(cpp_build.module_name("dmlshim_emulation", SOURCE)) else missing_tools()


@functools.lru_cache(maxsize=None)
def extension():
    """The compiled extension module (built on the first call, then cached).

    Raises:
        RuntimeError: no C++ compiler or no ninja on this machine, or the build failed.
    """
    lacking = missing()
    if lacking:
        raise RuntimeError(
            f"dmlshim.emulation on torch {torch.__version__} builds a small C++ extension "
            f"on first use (this torch has no Python PrivateUse1 backend API), and this "
            f"machine lacks {' and '.join(lacking)}. The shim itself (dmlshim.activate()) "
            f"needs neither; only the emulated device does.")
    return cpp_build.build("dmlshim_emulation", SOURCE)


_ext = None
# Zero-copy moves, the extension's own functions once setup() has run (no
# Python frame per move): to_device(cpu) -> device alias, cpu_alias(dev) -> CPU alias.
to_device = cpu_alias = None
wrap_number = None      # 0-dim tensor -> the same flagged as a wrapped number


def setup(device_type, device_module, fallback, take_op):
    """Build and load the extension, then route every op's first call to ``take_op``.

    Args:
        device_type: the backend's name (``"privateuseone"``, torch's default).
        device_module: what ``torch.privateuseone`` becomes.
        fallback: unused here (the C++ fallback redispatches to per-op kernels).
        take_op: ``(schema name, overload name) -> bool``: registers a Python
            kernel for the op; ``False`` leaves it to ``at::native::cpu_fallback``.

    Returns:
        An empty list (the C++ registrations live as long as the process).
    """
    global _ext, to_device, cpu_alias, wrap_number
    _ext = extension()
    # The extension's functions themselves: no Python frame per move.
    to_device, cpu_alias = _ext.to_device, _ext.cpu_alias
    wrap_number = _ext.wrap_number
    from .. import fallback
    fallback.wrap_number = wrap_number      # Python numbers become the CPU's wrapped numbers
    # The same-name rename marks the backend as registered: without it, newer
    # torch's backward() fails with "Cannot access accelerator device".
    torch.utils.rename_privateuse1_backend(device_type)
    torch._register_device_module(device_type, device_module)
    torch.utils.generate_methods_for_privateuse1_backend()
    _ext.set_first_call_hook(take_op)
    return []
