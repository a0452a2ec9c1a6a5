"""dmlshim as a package (issue 40): pyproject.toml declares every file the code reads at run
time as package data. ``make wheel-check`` builds the wheel, checks its file list and tests it
installed."""
import glob
import os
from pathlib import Path

try:
    import tomllib
except ImportError:                     # Python < 3.11: pytest depends on tomli there
    import tomli as tomllib

ROOT = Path(__file__).resolve().parents[1]
PYPROJECT = tomllib.loads((ROOT / "pyproject.toml").read_text("utf-8"))


def test_package_data_covers_every_non_python_file():
    # setuptools' rule: each package's patterns, globbed in that package's folder
    declared = {os.path.relpath(path, ROOT)
                for package, patterns in PYPROJECT["tool"]["setuptools"]["package-data"].items()
                for pattern in patterns
                for path in glob.glob(str(ROOT.joinpath(*package.split("."), pattern)))}
    files = {os.path.relpath(path, ROOT) for path in (ROOT / "dmlshim").rglob("*")
             if path.is_file() and path.suffix not in (".py", ".pyc")}
    assert sorted(files - declared) == [], "add these to [tool.setuptools.package-data]"

