"""dmlshim as a package (issue 40): pyproject.toml declares every file the code reads at run
time as package data, and the directml extra asks for torch-directml only where it has a
wheel. ``make wheel-check`` builds the wheel, checks its file list and tests it installed."""
import glob
import os
from pathlib import Path

import pytest
from packaging.requirements import Requirement

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


# torch-directml 0.2.5.dev240914's wheels: win_amd64 and manylinux2010_x86_64, CPython 3.8-3.12
@pytest.mark.parametrize("platform, machine, python, wanted", [
    ("win32", "AMD64", "3.9", True), ("win32", "AMD64", "3.12", True), ("linux", "x86_64", "3.11", True),
    ("win32", "AMD64", "3.13", False), ("win32", "ARM64", "3.11", False), ("win32", "x86", "3.11", False),
    ("linux", "aarch64", "3.11", False), ("darwin", "arm64", "3.11", False),
    ("darwin", "x86_64", "3.11", False),
])
def test_directml_extra_only_where_torch_directml_has_a_wheel(platform, machine, python, wanted):
    (requirement,) = map(Requirement, PYPROJECT["project"]["optional-dependencies"]["directml"])
    assert requirement.name == "torch-directml"
    environment = {"sys_platform": platform, "platform_machine": machine, "python_version": python}
    assert requirement.marker.evaluate(environment) is wanted
