"""The users' configuration: no C++ compiler (most Windows machines), or one that fails.

``activate()`` tries to get the compiled gate once per process, says once at WARNING that
it runs the Python gate and what that costs, and a failed build is remembered across
processes (source hash, torch, toolchain) until ``python -m dmlshim gate --rebuild``.
Each case runs in a child process with a PATH that has no compiler and an empty
extensions folder (but the emulated device's build, copied: torch 2.4.1 needs it)."""
import json
import os
import shutil
import stat
import subprocess
import sys

import pytest

from dmlshim import cpp_build
from dmlshim.emulation import _compiled
from dmlshim.patches import _gate

CHILD = """
import json, logging, sys, torch, dmlshim
from dmlshim import cpp_build, emulation, parity
from dmlshim.patches import _gate
builds = []
real_build = cpp_build.build
def counted(*args, **kwargs):
    builds.append(args[0])
    return real_build(*args, **kwargs)
cpp_build.build = counted
emulation.install()
dmlshim.activate()
x = torch.randn(4).to(emulation.DEVICE)
ok = parity.compare((x * (x > 0)).cpu(), x.cpu() * (x.cpu() > 0), parity.default_profile(emulation.DEVICE)).ok
dmlshim.deactivate(); dmlshim.activate()                  # a second activate(): no new try
print(json.dumps({"builds": builds.count("dmlshim_gate"), "ok": ok, "gate": _gate.report()}))
"""


@pytest.fixture
def no_compiler_env(tmp_path):
    """A child's environment: PATH is the interpreter's folder only (python, ninja; no
    c++), dmlshim's cache and the extensions folder in ``tmp_path``."""
    ext_dir = tmp_path / "torch_extensions"
    ext_dir.mkdir()
    name = cpp_build.module_name("dmlshim_emulation", _compiled.SOURCE)
    built = cpp_build._built(name, load=False)
    if built is None:
        _compiled.extension()                     # the suite's machine has g++: build it once
        built = cpp_build._built(name, load=False)
    shutil.copytree(os.path.dirname(built), ext_dir / name)
    env = {"PATH": os.path.dirname(sys.executable), "HOME": str(tmp_path), "XDG_CACHE_HOME": str(tmp_path / "cache"),
           "TORCH_EXTENSIONS_DIR": str(ext_dir), "PYTHONPATH": os.pathsep.join(sys.path)}
    assert shutil.which("c++", path=env["PATH"]) is None
    return env


def _child(env):
    proc = subprocess.run([sys.executable, "-c", CHILD], env=env, capture_output=True, text=True, timeout=600)
    assert proc.returncode == 0, proc.stderr[-3000:]
    return json.loads(proc.stdout.strip().splitlines()[-1]), proc.stderr


def _warnings(stderr: str):
    return [line for line in stderr.splitlines() if "no compiled gate" in line]


def test_without_a_compiler_one_try_one_warning(no_compiler_env):
    out, stderr = _child(no_compiler_env)
    assert out["ok"]
    assert out["builds"] == 1                        # one try a process, not one per kernel
    assert out["gate"]["kind"] == "python" and "C++ compiler" in out["gate"]["reason"]
    (line,) = _warnings(stderr)                      # one WARNING, printed with no logging set up
    assert "gate --rebuild" in line and "MSVC" in line and "x as long" in line


def test_python_gate_chosen_says_so_and_warns_nothing(no_compiler_env):
    out, stderr = _child({**no_compiler_env, "DMLSHIM_GATE": "python"})
    assert out["ok"] and out["builds"] == 0
    assert out["gate"] == {**out["gate"], "kind": "python", "reason": "DMLSHIM_GATE=python"}
    assert not _warnings(stderr)


def test_a_failed_build_is_remembered_across_processes(no_compiler_env, tmp_path):
    """A compiler that fails is run in the first process only; ``gate --rebuild`` runs it again."""
    log = tmp_path / "cxx.log"
    cxx = tmp_path / "bin" / "failing-c++"
    cxx.parent.mkdir()
    cxx.write_text(f"#!/bin/sh\necho run >> {log}\necho 'failing-c++: no such thing' >&2\nexit 1\n")
    cxx.chmod(cxx.stat().st_mode | stat.S_IEXEC)
    env = {**no_compiler_env, "CXX": str(cxx), "PATH": f"{cxx.parent}{os.pathsep}/bin{os.pathsep}"
           + no_compiler_env["PATH"]}

    first, stderr = _child(env)
    runs = log.read_text().count("run") if log.exists() else 0
    assert first["ok"] and first["builds"] == 1 and first["gate"]["kind"] == "python"
    assert runs > 0 and "building gate.cpp" in stderr        # the build announced itself
    assert len(_warnings(stderr)) == 1

    second, stderr = _child(env)
    assert second["ok"] and second["gate"]["kind"] == "python"
    assert "failed before" in second["gate"]["reason"] and "--rebuild" in second["gate"]["reason"]
    assert log.read_text().count("run") == runs             # no build attempt in a second process
    assert len(_warnings(stderr)) == 1

    rebuild = subprocess.run([sys.executable, "-m", "dmlshim", "gate", "--rebuild", "--json"], env=env,
                             capture_output=True, text=True, timeout=600)
    assert rebuild.returncode == 1, rebuild.stderr[-2000:]
    assert json.loads(rebuild.stdout)["kind"] == "python"
    assert log.read_text().count("run") > runs               # --rebuild forgot the failure


def test_info_states_the_gate(no_compiler_env):
    proc = subprocess.run([sys.executable, "-m", "dmlshim", "info", "--json"], env=no_compiler_env,
                          capture_output=True, text=True, timeout=600)
    assert proc.returncode == 0, proc.stderr[-2000:]
    gate = json.loads(proc.stdout)["gate"]
    assert gate["kind"] == "python" and "C++ compiler" in gate["reason"]
    text = subprocess.run([sys.executable, "-m", "dmlshim", "gate"], env=no_compiler_env,
                          capture_output=True, text=True, timeout=600).stdout
    assert text.startswith("gate") and "Python" in text and "C++ compiler" in text


def test_prebuild_keeps_each_torchs_gate_for_one_wheel(tmp_path, monkeypatch):
    """``make wheel-check`` on each lane: this torch's build goes into ``_prebuilt`` and the
    stash, and the stash's builds of the same source for other torch versions come back
    into ``_prebuilt`` (CI's 2.4.1 wheel carries the 2.13 lane's gate); another source's do not."""
    import sysconfig
    suffix = sysconfig.get_config_var("EXT_SUFFIX")
    source = tmp_path / "gate.cpp"
    source.write_text("// a source")
    name = cpp_build.module_name("dmlshim_gate", str(source))
    built = tmp_path / "cache" / (name + ".so")
    built.parent.mkdir()
    built.write_bytes(b"this torch's build")
    monkeypatch.setattr(cpp_build, "build", lambda prefix, src: type("M", (), {"__file__": str(built)}))
    monkeypatch.setattr(cpp_build, "PREBUILT_DIR", str(tmp_path / "_prebuilt"))
    stash = tmp_path / "stash"
    stash.mkdir()
    digest = name.rsplit("_", 1)[1]
    (stash / f"dmlshim_gate_torch9_9_9_{digest}{suffix}").write_bytes(b"another lane's")
    (stash / f"dmlshim_gate_torch9_9_9_00000000{suffix}").write_bytes(b"another source's")
    paths = cpp_build.prebuild("dmlshim_gate", str(source), stash=str(stash))
    other_lane = f"dmlshim_gate_torch9_9_9_{digest}{suffix}"
    assert sorted(os.path.basename(p) for p in paths) == sorted([name + suffix, other_lane])
    assert (stash / (name + suffix)).read_bytes() == b"this torch's build"
    assert cpp_build.prebuild("dmlshim_gate", str(source)) == paths      # no stash: _prebuilt as it is


# The Windows wheel's gate is compiled by MSVC (.github/workflows/wheels.yml), which has not
# run yet: the sources stay ISO C++17, so no GCC extension (a variable-length array, a
# statement expression, a designated initializer, a zero-length array ...) reaches it.
CXX_SOURCES = [_gate.SOURCE, _compiled.SOURCE]
GCC_ONLY = ("__builtin_", "__attribute__", "__typeof__", "typeof(", "__extension__", "<unistd.h>")


@pytest.mark.parametrize("path", CXX_SOURCES, ids=os.path.basename)
def test_cpp_sources_are_iso_cpp17(path):
    """``g++ -std=c++17 -pedantic-errors -fsyntax-only``, torch's and Python's headers as
    system headers (theirs are not ours to hold to it), and no GCC-only spelling."""
    from torch.utils.cpp_extension import include_paths
    import sysconfig

    compiler = shutil.which("g++")
    if compiler is None:
        pytest.fail("no g++ on PATH: the suite's machine has one (README, 'make setup')")
    headers = [*include_paths(), sysconfig.get_paths()["include"]]
    command = [compiler, "-std=c++17", "-fsyntax-only", "-pedantic-errors",
               *(flag for h in headers for flag in ("-isystem", h)),
               "-DTORCH_EXTENSION_NAME=dmlshim_check", path]
    proc = subprocess.run(command, capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, proc.stderr[-4000:]
    with open(path, encoding="utf-8") as f:
        text = f.read()
    assert [word for word in GCC_ONLY if word in text] == []
