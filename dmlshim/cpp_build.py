"""Building dmlshim's C++ extensions: the emulated device's (``emulation/csrc``) and the
compiled BackendSelect gate (``patches/csrc``).

``torch.utils.cpp_extension`` compiles a source on first use (about 30 s with g++ 12 and
ninja) and caches it under ``TORCH_EXTENSIONS_DIR`` (default
``~/.cache/torch_extensions``), one build per torch version and source hash, so checkouts
of different versions never rebuild each other's.  A build shipped in the wheel
(``dmlshim/_prebuilt``, for its torch and Python) is loaded first; a build that failed is
remembered (``remember=True``) so that no later process retries it with the same source,
torch and toolchain (``python -m dmlshim gate --rebuild`` forgets it).
"""
from __future__ import annotations

import contextlib
import glob
import hashlib
import importlib.util
import json
import logging
import os
import shutil
import sys
import sysconfig
import time
import warnings
from typing import Optional

import torch

from . import _cache, _torch_compat

STALE_LOCK_S = 600      # a build takes about 30 s; a lock this old outlived a killed build
PREBUILT_DIR = os.path.join(os.path.dirname(os.path.abspath(__file__)), "_prebuilt")
_log = logging.getLogger("dmlshim")


class FailedBefore(RuntimeError):
    """A build of this source, torch and toolchain failed in an earlier process."""


def _search_path() -> str:
    # ninja from pip lands next to the interpreter, which need not be on PATH.
    path = os.environ.get("PATH", "")
    scripts = sysconfig.get_path("scripts")
    return path if not scripts or scripts in path.split(os.pathsep) else scripts + os.pathsep + path


def toolchain() -> dict:
    """The tools a build would use: ``{"compiler": path or None, "ninja": path or None}``."""
    path = _search_path()
    compiler = "cl" if sys.platform == "win32" else os.environ.get("CXX", "c++")
    return {"compiler": shutil.which(compiler, path=path) or None, "compiler_name": compiler,
            "ninja": shutil.which("ninja", path=path) or None}


def missing_tools(tools: Optional[dict] = None):
    """What a build needs and this machine lacks (names, empty if nothing)."""
    tools = tools or toolchain()
    missing = []
    if tools["compiler"] is None:
        missing.append(f"a C++ compiler ({tools['compiler_name']!r} on PATH; MSVC Build Tools on Windows)")
    if tools["ninja"] is None:
        missing.append("ninja (pip install ninja)")
    return missing


def module_name(prefix: str, source: str) -> str:
    """``<prefix>_torch<version>_<hash of source>``: one build per torch and source."""
    tag = torch.__version__.split("+")[0].replace(".", "_")
    with open(source, "rb") as f:
        digest = hashlib.sha1(f.read()).hexdigest()[:8]
    return f"{prefix}_torch{tag}_{digest}"


def origin(module) -> str:
    """``"prebuilt"`` (shipped in the wheel) or ``"built on this machine"``."""
    path = os.path.abspath(getattr(module, "__file__", "") or "")
    return "prebuilt" if path.startswith(PREBUILT_DIR + os.sep) else "built on this machine"


def build(prefix: str, source: str, *, remember: bool = False):
    """The extension built from ``source`` (a ``.cpp`` path) as module :func:`module_name`:
    the wheel's prebuilt copy, else an earlier build on this machine, else compiled now
    (about 30-40 s, announced at WARNING on logger ``dmlshim``).

    ``remember``: a failed compile is recorded in dmlshim's cache folder, keyed by the
    module name (source hash, torch version) and the toolchain found; a later call with the
    same key raises :class:`FailedBefore` at once instead of compiling again.

    Raises:
        RuntimeError: no C++ compiler or no ninja (the message names them), the build
            failed, or (``FailedBefore``) it failed before with this key.
    """
    name = module_name(prefix, source)
    built = _built(name)
    if built is not None:
        return built
    tools = toolchain()
    missing = missing_tools(tools)
    if missing:
        raise RuntimeError(f"building {os.path.basename(source)} needs {' and '.join(missing)}")
    key = {"module": name, "torch": torch.__version__, "python": sys.version.split()[0],
           "compiler": tools["compiler"], "ninja": tools["ninja"]}
    if remember:
        before = failure(key)
        if before is not None:
            raise FailedBefore(f"building {os.path.basename(source)} failed before ({before}); "
                               f"'python -m dmlshim gate --rebuild' tries again")
    from torch.utils import cpp_extension
    os.environ["PATH"] = _search_path()    # torch runs ninja from PATH
    _remove_stale_lock(os.path.join(cpp_extension._get_build_directory(name, verbose=False), "lock"))
    _log.warning("dmlshim: building %s with %s, once per torch version (about 40 s) ...",
                 os.path.basename(source), tools["compiler"])
    start = time.perf_counter()
    try:
        module = cpp_extension.load(name=name, sources=[source], extra_cflags=["-O2"], verbose=False)
    except Exception as exc:
        if remember:
            _remember_failure(key, _last_line(exc))
        raise
    _log.warning("dmlshim: built %s in %.0f s", os.path.basename(source), time.perf_counter() - start)
    return module


def prebuild(prefix: str, source: str, stash: Optional[str] = None) -> list:
    """Build ``source`` here and copy the module into ``dmlshim/_prebuilt`` under its Python
    extension name, for a platform wheel (``make wheel-check``; setup.py tags the wheel).
    ``stash``: a folder that keeps each torch's build across lanes (CI installs one torch at a
    time): this one is added there, and the builds of the same source for other torch versions
    kept there are copied into ``_prebuilt`` too, so the wheel carries one per torch
    (:func:`build` loads the one of the running torch).  Returns the paths in ``_prebuilt``.

    Raises:
        RuntimeError: no compiler or ninja, or the build failed.
    """
    module = build(prefix, source)
    suffix = sysconfig.get_config_var("EXT_SUFFIX")
    name = module_name(prefix, source)
    target = os.path.join(PREBUILT_DIR, name + suffix)
    os.makedirs(PREBUILT_DIR, exist_ok=True)
    if os.path.abspath(module.__file__) != target:
        shutil.copyfile(module.__file__, target)
    if stash is not None:
        os.makedirs(stash, exist_ok=True)
        shutil.copyfile(target, os.path.join(stash, name + suffix))
        same_source = f"{prefix}_torch*_{name.rsplit('_', 1)[1]}{suffix}"
        for kept in glob.glob(os.path.join(stash, same_source)):
            shutil.copyfile(kept, os.path.join(PREBUILT_DIR, os.path.basename(kept)))
    return sorted(glob.glob(os.path.join(PREBUILT_DIR, "*" + suffix)))


# ------------------------------------------------------------------ failed builds, remembered

def failures_path() -> str:
    """The record of failed builds: ``build-failures.json`` in dmlshim's cache folder."""
    return os.path.join(_cache.folder(), "build-failures.json")


def _failures() -> list:
    try:
        with open(failures_path(), encoding="utf-8") as f:
            data = json.load(f)
        return data if isinstance(data, list) else []
    except (OSError, ValueError):
        return []


def failure(key: dict) -> Optional[str]:
    """The recorded reason a build with ``key`` failed, or None."""
    return next((f.get("reason", "") for f in _failures() if f.get("key") == key), None)


def _remember_failure(key: dict, reason: str) -> None:
    records = [f for f in _failures() if f.get("key") != key] + [
        {"key": key, "reason": reason, "when": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())}]
    _write_failures(records)


def forget_failures(prefix: str = "") -> int:
    """Forget the recorded failures of modules named ``prefix...`` (every one for "");
    returns how many were forgotten."""
    records = _failures()
    kept = [f for f in records if not str(f.get("key", {}).get("module", "")).startswith(prefix)]
    if len(kept) != len(records):
        _write_failures(kept)
    return len(records) - len(kept)


def _write_failures(records: list) -> None:
    path = failures_path()
    try:                                     # a record that cannot be written costs a retry
        _cache.write_json(path, records)
    except OSError as exc:
        _log.info("dmlshim: cannot record the failed build in %s: %s", path, exc)


def _last_line(exc: BaseException) -> str:
    lines = [line for line in str(exc).strip().splitlines() if line.strip()]
    return (lines[-1] if lines else type(exc).__name__)[:300]


def exists(name: str) -> bool:
    """Whether module ``name`` is prebuilt or was built on this machine (nothing loaded)."""
    return _built(name, load=False) is not None


def _built(name: str, load: bool = True):
    """Module ``name`` shipped in the wheel or from an earlier build, or None.  Its name holds
    the source's hash and torch's version, so a file of that name is this source's build:
    importing it skips importing ``torch.utils.cpp_extension`` and its ninja check (about 1 s a
    process).  The folder is ``cpp_extension``'s default; anywhere else, ``build`` finds it
    the slow way."""
    prebuilt = os.path.join(PREBUILT_DIR, name + (sysconfig.get_config_var("EXT_SUFFIX") or ".so"))
    if os.path.exists(prebuilt):
        return _load_file(name, prebuilt) if load else prebuilt
    cache = _torch_compat.user_cache_dir(appname="torch_extensions")     # cpp_extension's default root
    if cache is None:
        return None
    root = os.environ.get("TORCH_EXTENSIONS_DIR") or os.path.join(
        os.path.realpath(cache),
        f"py{sys.version_info.major}{sys.version_info.minor}{getattr(sys, 'abiflags', '')}_"
        + ("cpu" if torch.version.cuda is None else f"cu{torch.version.cuda.replace('.', '')}"))
    path = os.path.join(root, name, name + (".pyd" if sys.platform == "win32" else ".so"))
    if not os.path.exists(path):
        return None
    return _load_file(name, path) if load else path


def _load_file(name: str, path: str):
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
