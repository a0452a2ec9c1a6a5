"""A warning torch raises inside a call dmlshim wraps names the caller's line, as without
dmlshim (``dmlshim/patches/_caller.py``): not ``dmlshim/patches/load.py:161``."""
import io
import warnings

import pytest
import torch

import dmlshim
from dmlshim.patches import _caller

# torch < 2.6 warns that weights_only defaults to False; later torch when an environment
# variable forces it (both warnings.warn(..., stacklevel=2) inside torch.load)
_OLD_LOAD = tuple(int(p) for p in torch.__version__.split(".")[:2]) < (2, 6)


def _checkpoint() -> io.BytesIO:
    buffer = io.BytesIO()
    torch.save({"w": torch.ones(3)}, buffer)
    buffer.seek(0)
    return buffer


def test_torch_load_warning_names_the_caller(shim, dml_device, monkeypatch):
    if not _OLD_LOAD:
        monkeypatch.setenv("TORCH_FORCE_NO_WEIGHTS_ONLY_LOAD", "1")
    category = FutureWarning if _OLD_LOAD else UserWarning
    with pytest.warns(category, match="weights_only|WEIGHTS_ONLY") as record:
        loaded = torch.load(_checkpoint(), map_location=dml_device)
    assert loaded["w"].device == torch.device(dml_device)
    assert [(r.filename, r.category) for r in record] == [(__file__, category)]


def test_warning_of_a_wrapped_builtin_names_each_caller_line(default_shim):
    """A C++ TORCH_WARN (out= resized) under auto's wrapper of torch.add: at each calling
    line, and the "default" action still shows it once per line, as without dmlshim."""
    def resize():
        return torch.add(torch.ones(3), 1, out=torch.empty(2))

    with warnings.catch_warnings(record=True) as record:
        warnings.simplefilter("default")
        for _ in range(2):
            torch.add(torch.ones(3), 1, out=torch.empty(2))
        torch.add(torch.ones(3), 1, out=torch.empty(2))
        resize()
    lines = [(r.filename, r.lineno) for r in record if "was resized" in str(r.message)]
    assert len(lines) == 3 and len(set(lines)) == 3
    assert {f for f, _ in lines} == {__file__}
    dmlshim.deactivate()
    assert warnings._showwarnmsg is not _caller._showwarnmsg         # the hook goes too
