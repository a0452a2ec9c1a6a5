"""Tracing (DMLSHIM_TRACE) and report()."""
import json
import re
import logging
import os
import subprocess
import sys

import pytest
import torch

import dmlshim

MARKER = 4242.125          # a value that must never show up in a trace


@pytest.fixture(autouse=True)
def _inactive():
    dmlshim.deactivate()
    dmlshim.trace.reset()
    yield
    dmlshim.deactivate()


def _work(device):
    x = torch.full((3, 4), MARKER).to(device)
    m = (torch.arange(12).reshape(3, 4) % 2 == 0).to(device)
    x * m
    torch.cat([x, torch.zeros(0, 4).to(device)])


def test_log_trace_prints_each_record_once_when_the_app_configures_logging_later():
    """trace="log" adds a stderr handler only while nothing else would print; FunASR's
    logging.basicConfig() after activate() must not make every record print twice."""
    code = ("import logging; from dmlshim import trace; trace.start('log'); "
            "trace.logger.info('one'); logging.basicConfig(format='root: %(message)s'); "
            "trace.logger.info('two'); trace.stop(); trace.logger.warning('three')")
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0, proc.stderr
    assert proc.stderr.splitlines() == ["dmlshim: one", "root: two", "root: three"]


def test_trace_1_logs_one_line_per_intercepted_call(dml_device, caplog, monkeypatch):
    monkeypatch.setenv("DMLSHIM_TRACE", "1")
    dmlshim.activate(fallback="known")
    with caplog.at_level(logging.INFO, logger="dmlshim"):
        _work(dml_device)
    lines = [r.getMessage() for r in caplog.records if r.name == "dmlshim"]
    assert len(lines) == 2
    assert lines[0].startswith("aten::mul.Tensor coerce [f32[3, 4]@privateuseone:0, b8[3, 4]@privateuseone:0]")
    assert lines[1].startswith("aten::cat coerce [f32[3, 4]@privateuseone:0, f32[0, 4]@privateuseone:0]")
    assert all(line.endswith("us") for line in lines)
    assert not any(str(MARKER) in line or "4242" in line for line in lines)


def test_trace_path_writes_json_lines(dml_device, tmp_path):
    path = tmp_path / "trace.jsonl"
    dmlshim.activate(fallback="known", trace=str(path))
    _work(dml_device)
    dmlshim.deactivate()
    records = [json.loads(line) for line in path.read_text().splitlines()]
    assert [(r["op"], r["action"]) for r in records] == [("aten::mul.Tensor", "coerce"),
                                                         ("aten::cat", "coerce")]
    assert records[1]["inputs"] == [{"shape": [3, 4], "dtype": "float32", "device": "privateuseone:0"},
                                    {"shape": [0, 4], "dtype": "float32", "device": "privateuseone:0"}]
    assert {"us", "h2d", "d2h", "ts"} <= set(records[0])
    assert "4242" not in path.read_text()


def test_report_rows_and_table(dml_device):
    dmlshim.activate(fallback="known", trace=0)
    _work(dml_device)
    lstm = torch.nn.LSTM(4, 4).to(dml_device)
    lstm(torch.randn(2, 1, 4).to(dml_device))
    report = dmlshim.report()
    rows = {r["op"]: r for r in report.rows}
    assert rows["aten::mul.Tensor"]["calls"] == 1 and rows["aten::cat"]["actions"] == {"coerce": 1}
    lstm_row = rows["aten::lstm.input"]                 # the rnn patch's kernel
    assert lstm_row["actions"] == {"cpu": 1}
    assert lstm_row["d2h"] > 0 and lstm_row["h2d"] == (2 * 4 + 4 + 4) * 4
    assert lstm_row["seconds"] > 0
    table = str(report)
    assert table.splitlines()[0].split() == ["op", "calls", "actions", "ms", "own", "substitute", "overhead",
                                             "host->dev", "dev->host"]
    assert "aten::lstm.input" in table and re.search(r"cache rnn CPU weights: \d+ tensors", table)
    assert json.dumps(report.to_dict())


# the test device in a child: a process with torch_directml loaded cannot install the emulator
CHILD_DEVICE = {"emulated": "from dmlshim import emulation\ndev = emulation.install()\n",
                "directml": "import torch_directml\ndev = torch_directml.device()\n"}


def test_summary_table_at_exit(tmp_path, device_kind):
    path = tmp_path / "t.jsonl"
    code = ("import torch, dmlshim\n" + CHILD_DEVICE[device_kind] +
            "dmlshim.activate(fallback='known')\n"
            "torch.cat([torch.ones(2).to(dev), torch.zeros(0).to(dev)])\n")
    env = dict(os.environ, DMLSHIM_TRACE=str(path))
    done = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr
    assert "dmlshim summary" in done.stderr and "aten::cat" in done.stderr
    last = json.loads(path.read_text().splitlines()[-1])
    assert last["summary"]["ops"][0]["op"] == "aten::cat"

    env["DMLSHIM_TRACE"] = "1"
    done = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True, timeout=120)
    assert "dmlshim: aten::cat coerce" in done.stderr and "dmlshim: summary" in done.stderr
