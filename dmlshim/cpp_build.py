"""Building dmlshim's C++ extensions: the emulated device's (``emulation/csrc``) and the
compiled BackendSelect gate (``patches/csrc``).

``torch.utils.cpp_extension`` compiles a source on first use (about 30 s with g++ 12 and
ninja) and caches it under ``TORCH_EXTENSIONS_DIR`` (default
``~/.cache/torch_extensions``), one build per torch version and source hash, so checkouts
of different versions never rebuild each other's.
"""
from __future__ import annotations

import contextlib
import hashlib
import importlib.util
import os
import shutil
import sys
import sysconfig
import time
import warnings

import torch

STALE_LOCK_S = 600      # a build takes about 30 s; a lock this old outlived a killed build


def _search_path() -> str:
    # ninja from pip lands next to the interpreter, which need not be on PATH.
    path = os.environ.get("PATH", "")
    scripts = sysconfig.get_path("scripts")
    return path if not scripts or scripts in path.split(os.pathsep) else scripts + os.pathsep + path


def missing_tools():
    """What a build needs and this machine lacks (names, empty if nothing)."""
    path = _search_path()
    compiler = "cl" if sys.platform == "win32" else os.environ.get("CXX", "c++")
    missing = []
    if shutil.which(compiler, path=path) is None:
        missing.append(f"a C++ compiler ({compiler!r} on PATH; MSVC Build Tools on Windows)")
    if shutil.which("ninja", path=path) is None:
        missing.append("ninja (pip install ninja)")
    return missing


def build(prefix: str, source: str):
    """The extension built from ``source`` (a ``.cpp`` path) as module
    ``<prefix>_torch<version>_<hash>``, compiled on first use, then loaded from the cache.

    Raises:
        RuntimeError: no C++ compiler or no ninja (the message names them), or the build failed.
    """
    tag = torch.__version__.split("+")[0].replace(".", "_")
    with open(source, "rb") as f:
        digest = hashlib.sha1(f.read()).hexdigest()[:8]
    name = f"{prefix}_torch{tag}_{digest}"
    built = _built(name)
    if built is not None:
        return built
    missing = missing_tools()
    if missing:
        raise RuntimeError(f"building {os.path.basename(source)} needs {' and '.join(missing)}")
    from torch.utils import cpp_extension
    os.environ["PATH"] = _search_path()    # torch runs ninja from PATH
    _remove_stale_lock(os.path.join(cpp_extension._get_build_directory(name, verbose=False), "lock"))
    return cpp_extension.load(name=name, sources=[source], extra_cflags=["-O2"], verbose=False)


def _built(name: str):
    """Module ``name`` from an earlier build, or None.  Its name holds the source's hash and
    torch's version, so a file of that name is this source's build: importing it skips
    importing ``torch.utils.cpp_extension`` and its ninja check (about 1 s a process).  The
    folder is ``cpp_extension``'s default; anywhere else, ``build`` finds it the slow way."""
    try:
        from torch._appdirs import user_cache_dir        # cpp_extension's default root
    except ImportError:
        return None
    root = os.environ.get("TORCH_EXTENSIONS_DIR") or os.path.join(
        os.path.realpath(user_cache_dir(appname="torch_extensions")),
        f"py{sys.version_info.major}{sys.version_info.minor}{getattr(sys, 'abiflags', '')}_"
        + ("cpu" if torch.version.cuda is None else f"cu{torch.version.cuda.replace('.', '')}"))
    path = os.path.join(root, name, name + (".pyd" if sys.platform == "win32" else ".so"))
    if not os.path.exists(path):
        return None
    spec = importlib.util.spec_from_file_location(name, path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def _remove_stale_lock(lock: str) -> None:
    """Remove a build lock left by a process killed while building (older than
    ``STALE_LOCK_S`` seconds): torch's FileBaton waits for it forever, so every later
    process would hang in ``cpp_extension.load``."""
    try:
        age = time.time() - os.path.getmtime(lock)
    except OSError:
        return                              # no lock: nothing to do
    if age > STALE_LOCK_S:
        warnings.warn(f"dmlshim: removing {lock}, a build lock {age:.0f} s old "
                      "(a build killed before it finished)", RuntimeWarning, stacklevel=3)
        with contextlib.suppress(OSError):
            os.remove(lock)
