"""Checks of the installed wheel, run last by ``make wheel-check`` from a temp folder (no
``test_`` prefix: the suite in a checkout does not collect it): every dmlshim module that the
tests before it imported came from the venv's site-packages, never from a source tree."""
import importlib.metadata
import json
import os
import subprocess
import sys
import sysconfig

import dmlshim

SITE = os.path.realpath(sysconfig.get_paths()["purelib"])


def _installed(path):
    return os.path.commonpath([os.path.realpath(path), SITE]) == SITE


def test_dmlshim_is_the_wheel_not_a_checkout():
    assert _installed(dmlshim.__file__), dmlshim.__file__
    direct_url = json.loads(importlib.metadata.distribution("dmlshim").read_text("direct_url.json"))
    assert direct_url["url"].endswith(".whl") and "dir_info" not in direct_url
    # an editable install's finder (setuptools' __editable___*_finder) would serve a module
    # the wheel lacks from its checkout
    assert not [f for f in sys.meta_path if "__editable__" in getattr(f, "__module__", "")]


def test_every_dmlshim_module_loaded_came_from_the_wheel():
    modules = {name: getattr(module, "__file__", None) for name, module in sys.modules.items()
               if name == "dmlshim" or name.startswith("dmlshim.")}
    assert len(modules) > 20                    # the tests before this file imported them
    assert {name: file for name, file in modules.items() if file and not _installed(file)} == {}


def test_dmlshim_run_bootstraps_from_the_wheel(tmp_path):
    app = tmp_path / "app.py"
    app.write_text("import os, dmlshim\n"
                   "print(dmlshim.is_active(), os.environ['PYTHONPATH'].split(os.pathsep)[0])\n")
    res = subprocess.run([sys.executable, "-m", "dmlshim", "run", "--device", "emulated", str(app)],
                         capture_output=True, text=True, timeout=300)
    assert res.returncode == 0, res.stderr
    active, bootstrap = res.stdout.split()
    assert active == "True" and _installed(bootstrap), res.stdout


def test_the_gate_is_the_wheels_prebuilt_one_with_no_compiler_on_path():
    """make wheel-check installs the platform wheel and runs this with no compiler on PATH:
    ``info`` reports the prebuilt gate (issue 48), which activate() then uses."""
    import shutil
    assert not [c for c in ("c++", "g++", "cc", "cl") if shutil.which(c)]
    res = subprocess.run([sys.executable, "-m", "dmlshim", "run", "--device", "emulated", "-m", "dmlshim", "info",
                          "--json"], capture_output=True, text=True, timeout=300)
    assert res.returncode == 0, res.stderr
    gate = json.loads(res.stdout)["gate"]
    assert gate["kind"] == "compiled" and gate["origin"] == "prebuilt" and gate["in_use"], gate
    assert "no compiled gate" not in res.stderr
