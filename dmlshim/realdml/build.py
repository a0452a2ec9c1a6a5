"""Build the stack once into the user cache: ``python -m dmlshim realdml build``.

Steps (realdml README, facts 4-9): unpack vkd3d-proton 2.14 and apply ``patches/*.patch``
(SysV struct returns, the FP64 switch, fixed version strings); meson + ninja; compile the
``libd3d12.so`` forwarder and the ``libdxcore.so`` stand-in from ``csrc/``; unpack Mesa's
lavapipe from its Debian package into the stack's own folder (never system-wide); write the
Vulkan ICD file. The result lies in ``<user cache>/dmlshim/realdml/<key>``, where the key hashes
the sources, the patches, ``csrc/`` and this file: a second build with the same inputs takes
seconds and changes nothing.
"""
from __future__ import annotations

import hashlib
import json
import os
import shutil
import subprocess
import sys
import tarfile
import tempfile
import time
from pathlib import Path
from typing import Dict, List, Optional

from . import sources
from .stack import Stack, cache_root, set_current

HERE = Path(__file__).parent
PATCHES = sorted((HERE / "patches").glob("*.patch"))
CSRC = HERE / "csrc"
VERSIONS = {"vkd3d-proton": "2.14", "dxil-spirv": "33cd5b2e", "DirectX-Headers": "1.619.1",
            "mesa (lavapipe)": "25.0.7-2~bpo12+1", "torch-directml": "0.2.5.dev240914"}
# tool -> (names to look for, Debian package that provides it)
TOOLS = {
    "meson": (["meson"], "meson"),
    "ninja": (["ninja"], "ninja-build"),
    "widl": (["widl", "x86_64-w64-mingw32-widl", "widl-stable"], "mingw-w64-tools"),
    "glslang": (["glslangValidator", "glslang"], "glslang-tools"),
    "pkg-config": (["pkg-config"], "pkg-config"),
    "gcc": (["gcc"], "gcc"),
    "g++": (["g++"], "g++"),
    "patch": (["patch"], "patch"),
    "dpkg-deb": (["dpkg-deb"], "dpkg"),
}
APT_ALL = "meson ninja-build mingw-w64-tools glslang-tools pkg-config g++ patch libvulkan-dev"


class BuildError(RuntimeError):
    """A build step failed; the message names the step and the end of its output."""


class MissingTool(BuildError):
    """A build tool or header is not installed; the message names the Debian package."""


def build(source_dir: Optional[str] = None, jobs: Optional[int] = None, log=print) -> Stack:
    """Build the stack, or find it already built; make it the current one.

    Args:
        source_dir: folder with the files named in ``SHA256SUMS`` (default ``$DMLSHIM_REALDML_SOURCES``).
        jobs: parallel compile jobs (default: the number of CPUs).
        log: where progress lines go.

    Raises:
        SourceError: a source file is missing or its checksum differs.
        MissingTool: a build tool is missing (the message names the apt package).
        BuildError: a step failed.
    """
    root = cache_root()
    inputs = sources.locate(sources.directory(source_dir), root / "downloads")
    key = _key(inputs)
    stack = Stack(root / key)
    if stack.built():
        log(f"realdml: up to date: {stack.path}")
        set_current(stack)
        return stack
    tools = _tools()
    started = time.monotonic()
    root.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory(prefix=f"build-{key}-", dir=root) as work:
        staging = Path(work) / "stack"
        (staging / "lib").mkdir(parents=True)
        tree = _vkd3d_proton(inputs, Path(work), log)
        _meson(tree, Path(work) / "build", tools, jobs or os.cpu_count() or 1, staging / "lib", log)
        headers = _unpack_tar(inputs["DirectX-Headers-v1.619.1.tar.xz"], Path(work))
        _shims(headers, staging / "lib", log)
        _lavapipe(inputs, Path(work) / "mesa", staging, log)
        (staging / "stack.json").write_text(json.dumps(
            {"key": key, "versions": VERSIONS, "patches": [p.name for p in PATCHES],
             "built": time.strftime("%Y-%m-%dT%H:%M:%S%z"), "build_seconds": round(time.monotonic() - started, 1),
             "sources": {name: sources.sha256(path) for name, path in inputs.items()}}, indent=2))
        if stack.path.exists():
            shutil.rmtree(stack.path)
        staging.rename(stack.path)
    stack.write_icd()
    set_current(stack)
    log(f"realdml: built in {time.monotonic() - started:.0f} s: {stack.path}")
    return stack


def _key(inputs: Dict[str, Path]) -> str:
    """Hash of everything the result depends on."""
    h = hashlib.sha256()
    for name in sorted(inputs):
        h.update(f"{name} {sources.sha256(inputs[name])}\n".encode())
    for path in [*PATCHES, *sorted(CSRC.iterdir()), Path(__file__)]:
        h.update(path.name.encode() + b"\0" + path.read_bytes())
    return h.hexdigest()[:16]


def _tools() -> Dict[str, str]:
    """tool -> its path, or MissingTool naming every missing one's apt package."""
    found, missing = {}, []
    for tool, (names, package) in TOOLS.items():
        path = next((p for p in map(shutil.which, names) if p), None)
        if path:
            found[tool] = path
        else:
            missing.append(f"{tool} (apt package {package})")
    if not Path("/usr/include/vulkan/vulkan.h").is_file():
        missing.append("Vulkan headers and loader (apt package libvulkan-dev)")
    if missing:
        raise MissingTool(f"realdml build needs {', '.join(missing)}; on Debian or Ubuntu: "
                          f"sudo apt-get install {APT_ALL}")
    return found


def _step(name: str, cmd: List[str], cwd: Optional[Path] = None) -> None:
    done = subprocess.run(cmd, cwd=cwd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    if done.returncode:
        tail = "\n".join(done.stdout.splitlines()[-25:])
        raise BuildError(f"realdml build: {name} failed (exit {done.returncode}): {' '.join(cmd)}\n{tail}")


def _unpack_tar(archive: Path, dest: Path) -> Path:
    """Unpack ``archive`` into ``dest``; return its single top-level folder."""
    with tarfile.open(archive) as tar:
        top = {m.name.split("/")[0] for m in tar.getmembers()}
        if sys.version_info >= (3, 12):
            tar.extractall(dest, filter="data")
        else:
            tar.extractall(dest)
    if len(top) != 1:
        raise BuildError(f"{archive.name} should hold one top-level folder, holds {sorted(top)}")
    return dest / top.pop()


def _vkd3d_proton(inputs: Dict[str, Path], work: Path, log) -> Path:
    log("realdml: unpacking vkd3d-proton 2.14 and applying " + ", ".join(p.name for p in PATCHES))
    tree = _unpack_tar(inputs["vkd3d-proton-2.14-src.tar.xz"], work)
    for patch in PATCHES:
        _step(f"patch {patch.name}", ["patch", "-p1", "--forward", "--quiet", "-i", str(patch)], cwd=tree)
    return tree


def _meson(tree: Path, build_dir: Path, tools: Dict[str, str], jobs: int, lib: Path, log) -> None:
    log(f"realdml: building vkd3d-proton with meson + ninja -j{jobs} (minutes on a cold build)")
    native = build_dir.with_suffix(".ini")
    native.write_text(f"[binaries]\nwidl = '{tools['widl']}'\nglslang = '{tools['glslang']}'\n")
    _step("meson setup", [tools["meson"], "setup", str(build_dir), "--buildtype=release",
                          f"--native-file={native}"], cwd=tree)
    _step("ninja", [tools["ninja"], "-C", str(build_dir), f"-j{jobs}"])
    for name in ("d3d12/libvkd3d-proton-d3d12.so", "d3d12core/libvkd3d-proton-d3d12core.so"):
        shutil.copy2(build_dir / "libs" / name, lib)


def _shims(headers: Path, lib: Path, log) -> None:
    log("realdml: compiling the libd3d12.so forwarder and the libdxcore.so stand-in")
    include = headers / "include"
    _step("compile libdxcore.so", [
        "g++", "-std=c++17", "-O2", "-fPIC", "-shared", "-fvisibility=hidden", "-Wall", "-Wno-unknown-pragmas",
        f"-I{include}", f"-I{include / 'wsl' / 'stubs'}", f"-I{include / 'directx'}",
        "-o", str(lib / "libdxcore.so"), str(CSRC / "dxcore.cpp"), str(headers / "src" / "dxguids.cpp"),
        "-lvulkan"])
    _step("compile libd3d12.so", [
        "gcc", "-O2", "-fPIC", "-shared", "-Wall", f"-Wl,--version-script={CSRC / 'd3d12_forwarder.map'}",
        "-o", str(lib / "libd3d12.so"), str(CSRC / "d3d12_forwarder.c"), "-ldl"])


def _lavapipe(inputs: Dict[str, Path], mesa: Path, staging: Path, log) -> None:
    log("realdml: unpacking Mesa's lavapipe into the stack (not system-wide)")
    for name, path in inputs.items():
        if name.endswith(".deb"):
            _step(f"unpack {path.name}", ["dpkg-deb", "-x", str(path), str(mesa)])
    libs = mesa / "usr" / "lib" / "x86_64-linux-gnu"
    for pattern in ("libvulkan_lvp.so", "libdrm.so.2*", "libdrm_amdgpu.so.1*"):
        for path in libs.glob(pattern):
            shutil.copy2(path, staging / "lib", follow_symlinks=True)
