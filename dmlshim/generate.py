"""``python -m dmlshim generate [--check]``: write the files made from the code.

Two pieces are generated, never typed: the patch registry's ``from . import`` lists (every
module of ``dmlshim/patches/`` and ``dmlshim/integrations/``, so a new one is found without
editing the registry)
and the defect tables of docs/defects.md (``catalogue.markdown_table()``).  ``--check``
writes nothing and exits 1 when either is stale (the tests call :func:`stale`).
"""
from __future__ import annotations

import argparse
import re
import subprocess
import sys
import textwrap
from pathlib import Path
from typing import Callable, Dict, List

PACKAGE = Path(__file__).resolve().parent
REGISTRY_FILE = PACKAGE / "patches" / "__init__.py"
DEFECTS_PAGE = PACKAGE.parent / "docs" / "defects.md"
_IMPORTS = re.compile(r"(# BEGIN generated patch modules\n)(.*?)(# END generated patch modules\n)", re.S)
_TABLES = re.compile(r"(<!-- BEGIN generated: catalogue.markdown_table\(\) -->\n)(.*?)"
                     r"(<!-- END generated -->\n)", re.S)


# the folders of patch modules, and how the registry (dmlshim/patches/__init__.py) imports each
FOLDERS = {"patches": "from . import", "integrations": "from ..integrations import"}


def patch_modules(folder: str = "") -> List[str]:
    """The names of the patch modules in ``dmlshim/<folder>/`` (every folder of
    :data:`FOLDERS` if none; ``_``-prefixed modules are helpers)."""
    return sorted(p.stem for f in ([folder] if folder else FOLDERS) for p in (PACKAGE / f).glob("*.py")
                  if not p.stem.startswith("_"))


def _imports() -> str:
    lines = []
    for folder, statement in FOLDERS.items():
        names = textwrap.fill(", ".join(patch_modules(folder)), width=96, initial_indent="    ",
                              subsequent_indent="    ", break_on_hyphens=False)
        lines.append(f"{statement} (  # noqa: E402, F401  (read through globals() below)\n{names})\n")
    return "".join(lines)


def _tables() -> str:
    from . import catalogue
    return catalogue.markdown_table() + "\n"


# file -> (its generated block's pattern, what belongs there)
PIECES: Dict[Path, tuple] = {REGISTRY_FILE: (_IMPORTS, _imports), DEFECTS_PAGE: (_TABLES, _tables)}


def _rendered(path: Path, pattern: re.Pattern, make: Callable[[], str]) -> str:
    text = path.read_text(encoding="utf-8")
    if not pattern.search(text):
        raise ValueError(f"{path}: no generated block ({pattern.pattern.split(chr(10))[0]!r})")
    return pattern.sub(lambda m: m.group(1) + make() + m.group(3), text, count=1)


def _renewed() -> Dict[Path, str]:
    """``{file: its text with the generated block made now}`` for each stale file."""
    texts = {path: _rendered(path, pattern, make) for path, (pattern, make) in PIECES.items() if path.exists()}
    return {path: text for path, text in texts.items() if text != path.read_text(encoding="utf-8")}


def stale() -> List[Path]:
    """The files whose generated block differs from what the code gives now."""
    return list(_renewed())


def write() -> List[Path]:
    """Rewrite the stale files; returns them."""
    renewed = _renewed()
    for path, text in renewed.items():
        path.write_text(text, encoding="utf-8")
    return list(renewed)


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--check", action="store_true", help="write nothing; exit 1 if a file is stale")


def main(args: argparse.Namespace) -> int:
    changed = stale() if args.check else write()
    for path in changed:
        print(f"{'stale' if args.check else 'wrote'}: {path}")
    if REGISTRY_FILE in changed and not args.check:
        # a new patch module's rows reach the tables once the registry imports it: a new process
        return subprocess.run([sys.executable, "-m", "dmlshim", "generate"]).returncode
    return 1 if args.check and changed else 0
