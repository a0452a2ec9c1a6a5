"""A built stack and the environment a process runs under on it (realdml README, fact 9).

The environment puts the stack's libraries first on ``LD_LIBRARY_PATH``, points the Vulkan
loader at the stack's own ICD file, keeps vkd3d-proton's shader cache out of the working
directory, keeps vkd3d-proton quiet unless asked, fixes lavapipe's vector width (its wave
size) whatever the CPU, and sets ``DMLSHIM_REALDML_FP64``, which the
patched vkd3d-proton reads to report float64 (a GPU with float64) or not (one without).
"""
from __future__ import annotations

import json
import os
import shlex
import subprocess
import sys
from pathlib import Path
from typing import Dict, List, Mapping, Optional

ENV_STACK = "DMLSHIM_REALDML_STACK"
# Set in every process that runs on the stack: dmlshim reads it to tell the stack's own
# failures (a shader dxil-spirv cannot translate) apart from DirectML's.
ENV_MARK = "DMLSHIM_REALDML"
ENV_FP64 = "DMLSHIM_REALDML_FP64"
QUIET = {"VKD3D_DEBUG": "none", "VKD3D_SHADER_DEBUG": "none"}
# Lavapipe's subgroup size follows its vector width (4 lanes at 128 bits, 8 at 256, the
# default on an AVX2 CPU), and DirectML's shaders take other paths at other wave sizes:
# one width on every CPU keeps the stack's results the same.
WAVE = {"LP_NATIVE_VECTOR_WIDTH": "256"}


class NoBuild(RuntimeError):
    """No stack has been built on this machine (or ``$DMLSHIM_REALDML_STACK`` names none)."""


def cache_root() -> Path:
    """``<user cache>/dmlshim/realdml`` (platformdirs)."""
    import platformdirs

    return Path(platformdirs.user_cache_dir("dmlshim", appauthor=False)) / "realdml"


class Stack:
    """One built stack: ``lib/`` (the libraries), ``icd/lvp_icd.json``, ``stack.json``."""

    def __init__(self, path: Path):
        self.path = Path(path)

    def built(self) -> bool:
        return (self.path / "stack.json").is_file()

    def facts(self) -> dict:
        """What ``stack.json`` recorded at build time: key, versions, patches, sources' sums."""
        return json.loads((self.path / "stack.json").read_text())

    @property
    def icd(self) -> Path:
        return self.path / "icd" / "lvp_icd.json"

    def write_icd(self) -> None:
        """The Vulkan ICD file for the stack's own lavapipe (an absolute path: the loader
        must not find another ``libvulkan_lvp.so``)."""
        self.icd.parent.mkdir(exist_ok=True)
        self.icd.write_text(json.dumps({"file_format_version": "1.0.0", "ICD": {
            "library_path": str(self.path / "lib" / "libvulkan_lvp.so"), "api_version": "1.4.305"}}, indent=2))

    def environment(self, fp64: bool = True, verbose: bool = False,
                    base: Optional[Mapping[str, str]] = None) -> Dict[str, str]:
        """The variables a process needs on this stack (only those; merge with ``base`` yourself).

        Args:
            fp64: report float64 support (a GPU with float64; torch prints a device tensor
                through float64) or not (a consumer GPU without it, failure_modes.md row #7).
            verbose: leave vkd3d-proton's log on.
            base: the environment to extend (default ``os.environ``).
        """
        base = os.environ if base is None else base
        lib = str(self.path / "lib")
        paths = [lib] + [p for p in base.get("LD_LIBRARY_PATH", "").split(":") if p and p != lib]
        env = {
            "LD_LIBRARY_PATH": ":".join(paths),
            "VK_DRIVER_FILES": str(self.icd),
            "VK_ICD_FILENAMES": str(self.icd),  # Vulkan loaders before 1.3.207
            # one shader cache per build: vkd3d-proton keys its cache by its version, which a
            # patch to dxil-spirv leaves as it was, so another build's SPIR-V would be reused
            "VKD3D_SHADER_CACHE_PATH": str(_private_dir(cache_root() / "shader-cache" / self.path.name)),
            ENV_FP64: "1" if fp64 else "0",
            ENV_MARK: str(self.path),
        }
        if not base.get("XDG_RUNTIME_DIR"):
            env["XDG_RUNTIME_DIR"] = str(_private_dir(cache_root() / "runtime"))
        env.update({k: v for k, v in WAVE.items() if k not in base})
        if not verbose:
            env.update({k: v for k, v in QUIET.items() if k not in base})
        return env

    def run(self, command: List[str], fp64: bool = True, verbose: bool = False) -> int:
        """Run ``command`` on the stack; its exit status (128 + N when killed by signal N).

        Raises:
            FileNotFoundError: ``command[0]`` is not a program.
        """
        code = subprocess.call(command, env={**os.environ, **self.environment(fp64, verbose)})
        return 128 - code if code < 0 else code


def _private_dir(path: Path) -> Path:
    path.mkdir(parents=True, exist_ok=True, mode=0o700)
    return path


def set_current(stack: Stack) -> None:
    cache_root().mkdir(parents=True, exist_ok=True)
    (cache_root() / "current").write_text(stack.path.name + "\n")


def current() -> Stack:
    """The stack ``$DMLSHIM_REALDML_STACK`` names, else the last one built.

    Raises:
        NoBuild: there is none; the message says how to build one.
    """
    named = os.environ.get(ENV_STACK)
    if named:
        stack = Stack(Path(named))
        where = f"${ENV_STACK}={named}"
    else:
        pointer = cache_root() / "current"
        stack = Stack(cache_root() / pointer.read_text().strip()) if pointer.is_file() else None
        where = str(cache_root())
    if stack is None or not stack.built():
        raise NoBuild(f"no realdml stack built in {where}: run "
                      f"`python -m dmlshim realdml build --sources DIR` first (CI: --sources ../shared/realdml)")
    return stack


def export_lines(env: Mapping[str, str]) -> str:
    """``export NAME=value`` lines, shell-quoted."""
    return "\n".join(f"export {k}={shlex.quote(v)}" for k, v in sorted(env.items()))


def probe_device(stack: Stack, fp64: bool = True, python: str = sys.executable) -> dict:
    """Ask torch-directml on the stack, in a child process, for its adapter: ``{"count",
    "name", "float64"}``, or ``{"error": "..."}`` when it cannot tell (torch-directml missing,
    the stack broken)."""
    code = ("import json, torch_directml as t; n = t.device_count(); "
            "print(json.dumps({'count': n, 'name': t.device_name(0) if n else None, "
            "'float64': bool(t.has_float64_support(0)) if n else None}))")
    env = {**os.environ, **stack.environment(fp64)}
    done = subprocess.run([python, "-c", code], env=env, capture_output=True, text=True, timeout=300)
    if done.returncode:
        last = (done.stderr.strip().splitlines() or [f"exit {done.returncode}"])[-1]
        return {"error": last}
    return json.loads(done.stdout.strip().splitlines()[-1])
