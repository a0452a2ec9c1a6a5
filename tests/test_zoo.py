"""examples/zoo.py: the compatibility table, on three FunASR families (fast)."""
import json
import re

import pytest

import dmlshim

import zoo  # examples/, on sys.path via conftest.py


@pytest.mark.emulated_only(reason="examples/zoo.py runs the model zoo on emulation.install() in this "
                                   "process (it has no --device)")
def test_zoo_table_rows_and_results_file(tmp_path, capsys, dml_device, profile):
    path = tmp_path / "zoo.json"
    try:
        status = zoo.main(["--only", "SenseVoice", "Whisper", "Nano", "--json", str(path),
                           "--cache-dir", str(tmp_path)])
    finally:
        dmlshim.deactivate()
    out = capsys.readouterr().out
    assert status == 0, out
    data = json.loads(path.read_text(encoding="utf-8"))
    assert data["benchmark"] == "zoo" and data["extra"]["profile"] == profile
    assert {"date", "torch", "cpu"} <= set(data["machine"])
    rows = [[row[column] for column in zoo.HEADER] for row in data["rows"]]
    sensevoice, whisper, nano = rows
    # SenseVoice: raw, its CTC forced alignment's gather(dim=-1) ignores the index (#43), so
    # the path it backtracks indexes past the end; with the shim the CPU's transcripts: the
    # gather counted from 0, one `lt` of operands of two ranks and dtypes reshaped
    # (int_broadcast: the real binary reads the smaller operand's first value)
    assert sensevoice[0] == "SenseVoiceSmall"
    assert sensevoice[1].startswith("`RuntimeError: index ") and "ctc_alignment.py" in sensevoice[1]
    # (beside the integer fix's range reads, patches/int_range.py)
    assert re.search(r"`aten::gather`[^`]* coerce=", sensevoice[2]), sensevoice[2]
    assert re.search(r"`aten::lt.Tensor`[^`]* coerce=", sensevoice[2]), sensevoice[2]
    assert "0 token edit(s)" in sensevoice[3]
    assert " s / " in sensevoice[4]
    # Whisper: its sparse buffer fails raw; with the shim it is a CPU island and the
    # transcripts equal the CPU's
    assert whisper[1].startswith("`NotImplementedError: ") and "SparsePrivateUse1" in whisper[1]
    assert "`Tensor.to` island=" in whisper[2] and "0 token edit(s)" in whisper[3]
    # Fun-ASR-Nano: transformers' Qwen3 decode concatenates onto an empty KV cache, which
    # DirectML rejects; the shim drops the empty input and stays on the device
    assert nano[0] == "Fun-ASR-Nano (SenseVoice encoder + Qwen3, transformers)"
    assert nano[1].startswith("`RuntimeError: The parameter is incorrect")
    assert "`aten::cat` coerce=" in nano[2] and "0 token edit(s)" in nano[3]
    assert f"parity profile '{profile}'" in out
