"""``python -m dmlshim check``: the coverage report of code run on the emulated device."""
import json
import os
import subprocess
import sys
import textwrap

import pytest

import dmlshim
from dmlshim import check, emulation

# check.run installs the emulated device in this process, which torch_directml's cannot hold
_IN_PROCESS = pytest.mark.emulated_only(
    reason="check.run runs the script on the emulated device in this process (emulation.install), "
           "which a process with torch_directml loaded cannot install")
_HYPOT = pytest.mark.emulated_only(
    reason="check.run reports emulation.records() of a script run with an injected hypot Rule")

# A small model with what DirectML gets wrong: float x bool (silently bool, #17),
# an empty input to cat (#19/#20), an LSTM (#1), a silent CPU fallback (roll,
# #33) and an op failing through a rule we invent (hypot).
SCRIPT = textwrap.dedent("""
    import sys
    import torch
    from dmlshim import emulation

    def main():
        dev = emulation.install()
        torch.manual_seed(0)
        x = torch.rand(4, 8, device=dev)
        mask = torch.rand(4, 8, device=dev) > 0.5
        y = x * mask
        z = torch.cat([y, torch.empty(0, 8, device=dev)])
        lstm = torch.nn.LSTM(8, 8).to(dev)
        out, _ = lstm(z.unsqueeze(1))
        out = torch.roll(out, 1, 0)
        r = torch.hypot(out, out)
        print("OUT", r.shape, r.device, sys.argv[1:])
        return 0

    if __name__ == "__main__":
        sys.exit(main())
""")


@pytest.fixture
def script(tmp_path):
    path = tmp_path / "model_script.py"
    path.write_text(SCRIPT, encoding="utf-8")
    return path


@pytest.fixture
def hypot_fails(dml_device):
    with emulation.configured(rules=[emulation.Rule("hypot", source="invented")], extend=True):
        yield


@_HYPOT
def test_check_with_shim_reports_each_fix(script, hypot_fails, capsys):
    result = check.run(str(script), ["--flag", "x"])
    assert result["exit_code"] == 0 and result["error"] is None
    assert "OUT torch.Size([4, 1, 8]) privateuseone:0 ['--flag', 'x']" in capsys.readouterr().out
    handled = {r["op"]: r for r in result["handled"]}
    assert set(handled["aten::cat"]["actions"]) == {"coerce"}
    assert any("mul" in op and "coerce" in r["actions"] for op, r in handled.items())
    lstm = [r for op, r in handled.items() if "lstm" in op.lower()]
    assert lstm and lstm[0]["actions"].get("cpu") == 1 and lstm[0]["d2h"] > 0
    assert handled["torch.hypot"]["actions"] == {"cpu": 1}
    assert "E_INVALIDARG" in handled["torch.hypot"]["reason"]
    assert {r["op"] for r in result["device_failures"]} == {"hypot"}
    assert "roll" in {r["op"] for r in result["silent_cpu_fallbacks"]}
    assert not dmlshim.is_active()                              # check cleaned up after itself
    text = check.format_report(result)
    for needle in ("Handled by dmlshim", "torch.hypot", "aten::cat", "Silent CPU fallbacks", "roll"):
        assert needle in text


@_HYPOT
def test_check_without_shim_lists_what_breaks(script, hypot_fails):
    result = check.run(str(script), shim=False)
    assert result["exit_code"] == 1 and result["fallback"] == "off"
    # The empty-input cat is the first hard failure; the report names its HRESULT.
    assert result["error"]["type"] == "DirectMLError"
    assert "E_INVALIDARG (0x80070057)" in result["error"]["message"]
    assert result["error"]["where"].startswith(f"{script}:")
    failures = {r["op"]: r for r in result["device_failures"]}
    assert failures["mul.Tensor"]["quirk"] == 1                 # silently bool (#17)
    assert failures["cat"]["failed"] == 1                       # empty input (#19/#20)
    # dmlshim only observed: nothing was fixed (mul's and cat's fixes sit at BackendSelect,
    # not installed in "off")
    assert result["handled"] == []
    text = check.format_report(result)
    assert "WITHOUT dmlshim" in text and "E_INVALIDARG" in text


@_HYPOT
def test_check_module_callable(tmp_path, monkeypatch, hypot_fails):
    (tmp_path / "checked_mod.py").write_text(SCRIPT, encoding="utf-8")
    monkeypatch.syspath_prepend(str(tmp_path))
    result = check.run("checked_mod:main")
    assert result["exit_code"] == 0
    assert "torch.hypot" in {r["op"] for r in result["handled"]}


@_IN_PROCESS
def test_check_select_device_gives_the_emulated_device(tmp_path, dml_device):
    path = tmp_path / "select.py"
    path.write_text("import dmlshim, torch\n"
                    "assert dmlshim.select_device().type == 'privateuseone'\n"
                    "torch.cat([torch.ones(2, device=dmlshim.select_device()), "
                    "torch.ones(0, device=dmlshim.select_device())])\n", encoding="utf-8")
    result = check.run(str(path))
    assert result["exit_code"] == 0, result["error"]
    assert os.environ.get("DMLSHIM_DEVICE") != "directml"      # environment restored


@_IN_PROCESS
def test_torch_directml_is_hidden_during_the_run(tmp_path, dml_device):
    path = tmp_path / "hidden.py"
    path.write_text("try:\n    import torch_directml\nexcept ImportError:\n    pass\n"
                    "else:\n    raise SystemExit(3)\n", encoding="utf-8")
    assert check.run(str(path))["exit_code"] == 0
    assert sys.modules.get("torch_directml", "absent") == "absent"


@_IN_PROCESS
def test_check_reports_a_missing_target(tmp_path, dml_device):
    result = check.run(str(tmp_path / "nope.py"))
    assert result["exit_code"] == 1 and result["error"]["type"] == "FileNotFoundError"


def test_cli_json(script, tmp_path):
    out = tmp_path / "report.json"
    proc = subprocess.run([sys.executable, "-m", "dmlshim", "check", "--json", "-o", str(out),
                           str(script)], capture_output=True, text=True, timeout=300,
                          cwd=os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
    assert proc.returncode == 0, proc.stderr[-2000:]
    data = json.loads(out.read_text(encoding="utf-8"))
    assert data["exit_code"] == 0 and data["shim"] is True
    assert "aten::cat" in {r["op"] for r in data["handled"]}
    assert "roll" in {r["op"] for r in data["silent_cpu_fallbacks"]}


@_IN_PROCESS
def test_check_points_at_the_user_frame_even_in_a_folder_named_torch(tmp_path, dml_device):
    # Library frames are told apart by torch's and dmlshim's folders, not by a
    # "/torch/" substring (which also misses Windows paths).
    folder = tmp_path / "torch"
    folder.mkdir()
    path = folder / "fails.py"
    path.write_text("import torch\n\n\ndef boom():\n    torch.ones(2).view(3)\n\n\nboom()\n",
                    encoding="utf-8")
    error = check.run(str(path))["error"]
    assert error["type"] == "RuntimeError"
    assert error["where"] == f"{path}:5 (boom)"
