"""``python -m dmlshim realdml``: sources checked, tools named, the environment, the command line.

The last tests run on a built stack with torch-directml installed (the real lane,
``make test-realdml``); elsewhere they are skipped with the reason.
"""
import hashlib
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
import torch

from dmlshim.__main__ import main
from dmlshim.realdml import build as build_module, sources, stack as stack_module
from dmlshim.realdml.build import MissingTool
from dmlshim.realdml.sources import SourceError
from dmlshim.realdml.stack import NoBuild, Stack

SHARED = Path(__file__).resolve().parents[1].parent / "shared" / "realdml"


@pytest.fixture
def cache(tmp_path, monkeypatch):
    """A private user cache (platformdirs reads XDG_CACHE_HOME) and no stack chosen by name."""
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "cache"))
    monkeypatch.delenv(stack_module.ENV_STACK, raising=False)
    monkeypatch.delenv(sources.ENV, raising=False)
    return tmp_path / "cache" / "dmlshim" / "realdml"


def _fake_stack(path: Path) -> Stack:
    (path / "lib").mkdir(parents=True)
    (path / "stack.json").write_text('{"key": "k", "versions": {}, "patches": [], "built": "now"}')
    stack = Stack(path)
    stack.write_icd()
    return stack


def test_sums_name_the_four_inputs():
    names = set(sources.expected())
    assert names == {"vkd3d-proton-2.14-src.tar.xz", "DirectX-Headers-v1.619.1.tar.xz",
                     "debs/mesa-vulkan-drivers_25.0.7-2~bpo12+1_amd64.deb",
                     "debs/libdrm2_2.4.123-1~bpo12+1_amd64.deb",
                     "debs/libdrm-amdgpu1_2.4.123-1~bpo12+1_amd64.deb"}


def test_a_missing_sources_directory_is_named(tmp_path):
    with pytest.raises(SourceError, match=r"nowhere does not exist \(from --sources\).*vkd3d-proton-2.14-src"):
        sources.directory(str(tmp_path / "nowhere"))


def test_a_file_with_another_checksum_is_refused(tmp_path, monkeypatch):
    folder = tmp_path / "src"
    folder.mkdir()
    (folder / "vkd3d-proton-2.14-src.tar.xz").write_bytes(b"not the tarball")
    monkeypatch.setattr(sources, "expected",
                        lambda: {"vkd3d-proton-2.14-src.tar.xz": hashlib.sha256(b"the tarball").hexdigest()})
    with pytest.raises(SourceError, match=r"checksum mismatch for .*vkd3d-proton-2.14-src.tar.xz: SHA-256 [0-9a-f]{64}, expected"):
        sources.locate(folder, tmp_path / "downloads")


def test_a_missing_github_tree_says_how_to_give_it(tmp_path):
    folder = tmp_path / "src"
    folder.mkdir()
    with pytest.raises(SourceError, match=r"missing source file \S+.tar.xz in .*repacked GitHub tree.*pass --sources DIR holding"):
        sources.locate(folder, tmp_path / "downloads")


@pytest.mark.skipif(not SHARED.is_dir(), reason="the shared sources (../shared/realdml) are not on this machine")
def test_the_shared_sources_pass_their_checksums(tmp_path):
    found = sources.locate(SHARED, tmp_path / "downloads")
    assert set(found) == set(sources.expected())
    assert not (tmp_path / "downloads").exists()          # nothing was downloaded


def test_a_missing_build_tool_names_its_apt_package(monkeypatch):
    real_which = shutil.which
    monkeypatch.setattr(build_module.shutil, "which",
                        lambda name: None if name in ("meson", "glslangValidator", "glslang") else real_which(name))
    with pytest.raises(MissingTool, match=r"meson \(apt package meson\).*glslang \(apt package glslang-tools\)"
                                          r".*apt-get install"):
        build_module._tools()


def test_run_without_a_build_says_how_to_build(cache, capsys):
    assert main(["realdml", "run", "--", "true"]) == 2
    err = capsys.readouterr().err
    assert "no realdml stack built in" in err and "realdml build --sources DIR" in err
    with pytest.raises(NoBuild):
        stack_module.current()


def test_run_without_a_command_is_refused(cache, capsys):
    _fake_stack(cache / "abc")
    stack_module.set_current(Stack(cache / "abc"))
    assert main(["realdml", "run"]) == 2
    assert "no command" in capsys.readouterr().err


def test_the_environment_puts_the_stack_first_and_keeps_caches_out_of_the_cwd(cache, tmp_path):
    stack = _fake_stack(cache / "abc")
    env = stack.environment(base={"LD_LIBRARY_PATH": "/opt/x"})
    assert env["LD_LIBRARY_PATH"] == f"{stack.path / 'lib'}:/opt/x"
    assert env["VK_DRIVER_FILES"] == env["VK_ICD_FILENAMES"] == str(stack.icd)
    assert Path(env["VKD3D_SHADER_CACHE_PATH"]).is_relative_to(cache)
    assert env["VKD3D_DEBUG"] == env["VKD3D_SHADER_DEBUG"] == "none"
    assert env["DMLSHIM_REALDML_FP64"] == "1" and env["DMLSHIM_REALDML"] == str(stack.path)
    assert env["LP_NATIVE_VECTOR_WIDTH"] == "256"        # the same wave size on every CPU
    assert Path(env["XDG_RUNTIME_DIR"]).is_dir()
    quiet_off = stack.environment(fp64=False, verbose=True, base={"XDG_RUNTIME_DIR": "/run/user/0"})
    assert "VKD3D_DEBUG" not in quiet_off and "XDG_RUNTIME_DIR" not in quiet_off
    assert quiet_off["DMLSHIM_REALDML_FP64"] == "0"
    assert '"library_path": "' + str(stack.path / "lib" / "libvulkan_lvp.so") in stack.icd.read_text()


def test_env_prints_export_lines_and_run_passes_the_exit_status(cache, capsys):
    stack = _fake_stack(cache / "abc")
    stack_module.set_current(stack)
    assert main(["realdml", "env", "--no-fp64"]) == 0
    lines = capsys.readouterr().out.splitlines()
    assert "export DMLSHIM_REALDML_FP64=0" in lines
    assert all(line.startswith("export ") for line in lines)
    assert main(["realdml", "run", "--", sys.executable, "-c",
                 "import os, sys; sys.exit(7 if os.environ['DMLSHIM_REALDML_FP64'] == '1' else 1)"]) == 7


def test_the_build_key_follows_every_input(tmp_path, monkeypatch):
    a = tmp_path / "a"
    a.write_bytes(b"one")
    key = build_module._key({"a": a})
    assert build_module._key({"a": a}) == key
    a.write_bytes(b"two")
    assert build_module._key({"a": a}) != key


# ------------------------------------------------------------------ on a built stack (real lane)

def _built_stack():
    try:
        import torch_directml  # noqa: F401  (only under `realdml run` can it load)
        return stack_module.current()
    except (ImportError, OSError, NoBuild):
        return None


ON_STACK = pytest.mark.skipif(_built_stack() is None or not os.environ.get("DMLSHIM_REALDML"),
                              reason="needs `realdml run` on a built stack with torch-directml (make test-realdml)")


@ON_STACK
def test_the_done_when_command_prints_the_tensor():
    stack = stack_module.current()
    out = subprocess.run([sys.executable, "-m", "dmlshim", "realdml", "run", "--", sys.executable, "-c",
                          "import torch, torch_directml; print(torch.ones(3, device=torch_directml.device()) + 1)"],
                         capture_output=True, text=True, timeout=300)
    assert out.returncode == 0, out.stderr
    assert out.stdout.strip() == "tensor([2., 2., 2.], device='privateuseone:0')", (stack.path, out.stdout)


@ON_STACK
@pytest.mark.skipif(not SHARED.is_dir(), reason="the shared sources (../shared/realdml) are not on this machine")
def test_a_second_build_finds_the_first():
    stack = stack_module.current()
    stamp = (stack.path / "stack.json").stat().st_mtime_ns
    again = build_module.build(str(SHARED), log=lambda line: None)
    assert again.path == stack.path and (stack.path / "stack.json").stat().st_mtime_ns == stamp


@ON_STACK
def test_info_names_the_adapter_and_float64(capsys):
    assert main(["realdml", "info", "--json"]) == 0
    import json
    data = json.loads(capsys.readouterr().out)
    assert data["adapter"].get("count") == 1, data["adapter"]
    assert data["adapter"]["float64"] is True and data["fp64"] is True     # info probes with --fp64 by default
    assert data["versions"]["vkd3d-proton"] == "2.14"



# DirectML's reduction shaders (dxbc2dxil) end their groupshared tree with a load through a
# constant GEP at a byte offset; dxil-spirv dropped that offset and read shared[0] twice, so a
# row of 8+ elements summed x[0], x[0], x[2], x[2], ... (arange(9.0).sum() gave 40; FunASR's
# SANM encoder length 104 for 103 frames). vkd3d-proton-dxil-spirv-tgsm-constant-gep.patch
# keeps the offset (docs/realdml.md, "Groupshared constant offsets").
_ROWS = ("import torch, torch_directml; d = torch_directml.device(); "
         "x = torch.arange(9.0); r = torch.linspace(-2, 3, 2 * 5 * 103).view(2, 5, 103); "
         "print(x.to(d).sum().item(), torch.ones(1, 103, dtype=torch.bool).to(d).sum(1).item(), "
         "*r.to(d).sum(-1).flatten().tolist(), *r.to(d).softmax(-1).amax(-1).flatten().tolist())")


@ON_STACK
def test_row_reductions_on_the_stack_match_the_cpu(assert_parity):
    out = subprocess.run([sys.executable, "-m", "dmlshim", "realdml", "run", "--", sys.executable, "-c", _ROWS],
                         capture_output=True, text=True, timeout=300)
    assert out.returncode == 0, out.stderr
    r = torch.linspace(-2, 3, 2 * 5 * 103).view(2, 5, 103)
    want = [36.0, 103.0, *r.sum(-1).flatten().tolist(), *r.softmax(-1).amax(-1).flatten().tolist()]
    assert_parity(torch.tensor([float(v) for v in out.stdout.split()]), torch.tensor(want), profile="device")
