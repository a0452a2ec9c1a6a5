"""The stack's inputs: four files named in ``SHA256SUMS`` (shipped beside this module), taken
from a directory (``--sources`` or ``DMLSHIM_REALDML_SOURCES``) and checked before any use.

Where no directory is given, the Debian packages come from Debian's archive (bookworm-backports),
checked against the same sums; vkd3d-proton and DirectX-Headers are GitHub trees (a tag plus
submodule commits) that the shipped checksums describe as repacked tarballs, so they must be in
the directory: ``../shared/realdml`` on CI.
"""
from __future__ import annotations

import hashlib
import os
import urllib.request
from pathlib import Path
from typing import Dict, Optional

ENV = "DMLSHIM_REALDML_SOURCES"
SUMS = Path(__file__).with_name("SHA256SUMS")
DEBIAN_POOL = "https://deb.debian.org/debian/pool/main/"
# Debian package -> its folder in the pool (bookworm-backports)
DEBIAN_FOLDERS = {"mesa-vulkan-drivers": "m/mesa", "libdrm2": "libd/libdrm", "libdrm-amdgpu1": "libd/libdrm"}


class SourceError(RuntimeError):
    """A source file is missing, unreadable or not the one ``SHA256SUMS`` names."""


def expected() -> Dict[str, str]:
    """Relative path -> SHA-256 hex digest, from the shipped ``SHA256SUMS``."""
    sums = {}
    for line in SUMS.read_text().splitlines():
        if line.strip():
            digest, name = line.split(maxsplit=1)
            sums[name.strip()] = digest
    return sums


def sha256(path: Path) -> str:
    h = hashlib.sha256()
    with open(path, "rb") as f:
        for block in iter(lambda: f.read(1 << 20), b""):
            h.update(block)
    return h.hexdigest()


def directory(given: Optional[str]) -> Optional[Path]:
    """The sources directory: ``given``, else ``$DMLSHIM_REALDML_SOURCES``, else None."""
    chosen = given or os.environ.get(ENV)
    if not chosen:
        return None
    path = Path(chosen).expanduser()
    if not path.is_dir():
        raise SourceError(f"sources directory {path} does not exist (from "
                          f"{'--sources' if given else ENV}); it must hold: {', '.join(expected())}")
    return path


def locate(folder: Optional[Path], download_to: Path) -> Dict[str, Path]:
    """Every input, checked against ``SHA256SUMS``: relative name -> path.

    Files missing from ``folder`` (or all, when it is None) are downloaded into ``download_to``
    where an upstream address is known (the Debian packages).

    Raises:
        SourceError: a file is missing and cannot be downloaded, or its checksum differs.
    """
    found = {}
    for name, digest in expected().items():
        path = folder / name if folder else None
        if path is None or not path.is_file():
            path = _download(name, download_to, folder)
        actual = sha256(path)
        if actual != digest:
            raise SourceError(f"checksum mismatch for {path}: SHA-256 {actual}, expected {digest} "
                              f"({SUMS.name} shipped with dmlshim)")
        found[name] = path
    return found


def _download(name: str, dest: Path, folder: Optional[Path]) -> Path:
    where = f"in {folder}" if folder else f"(no --sources directory and no {ENV})"
    package = Path(name).name.split("_")[0]
    if not name.startswith("debs/") or package not in DEBIAN_FOLDERS:
        raise SourceError(f"missing source file {name} {where}; it is a repacked GitHub tree that "
                          f"dmlshim cannot fetch: pass --sources DIR holding {', '.join(expected())}")
    url = DEBIAN_POOL + DEBIAN_FOLDERS[package] + "/" + Path(name).name
    target = dest / name
    target.parent.mkdir(parents=True, exist_ok=True)
    try:
        with urllib.request.urlopen(url, timeout=60) as response, open(target, "wb") as out:
            out.write(response.read())
    except OSError as e:
        raise SourceError(f"missing source file {name} {where}, and downloading {url} failed: {e}") from e
    return target
