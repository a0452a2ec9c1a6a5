"""dmlshim.errors: HRESULT recognition, code-page decoding, classification.

The byte strings are what FormatMessageA returns on localized Windows
(failure_modes.md Note A); each must fail UTF-8 decoding exactly as reported.
"""
import pickle

import pytest
import torch

from dmlshim import errors
from dmlshim.errors import DirectMLError, classify, decode, recognise, translate

# (code page, localized text, HRESULT name, reported first bad byte, position)
LOCALIZED = [
    ("cp936", "参数错误。", "E_INVALIDARG", 0xB2, 0),                 # row #4
    ("cp1251", "Параметр задан неверно.", "E_INVALIDARG", 0xCF, 0),   # row #5 (ru)
    ("cp932", "パラメーターが間違っています。", "E_INVALIDARG", 0x83, 0),
    ("cp949", "매개 변수가 틀립니다.", "E_INVALIDARG", 0xB8, 0),
    ("cp950", "參數錯誤。", "E_INVALIDARG", 0xB0, 0),
    ("cp936", "存储空间不足，无法完成此操作。", "E_OUTOFMEMORY", 0xB4, 0),
    ("cp936", "GPU 设备实例已经暂停。使用 GetDeviceRemovedReason 以确定相应的操作。",
     "DXGI_ERROR_DEVICE_REMOVED", 0xC9, 4),
    ("cp936", "未指定的错误", "E_FAIL", 0xB6, 4),
]


def utf8_error(text, cp):
    """The UnicodeDecodeError Python raises for a message in code page ``cp``."""
    with pytest.raises(UnicodeDecodeError) as info:
        text.encode(cp).decode("utf-8")
    return info.value


@pytest.fixture(autouse=True)
def utf8_locale(monkeypatch):
    # The host's ANSI code page must not decide these tests: pretend UTF-8.
    monkeypatch.delenv("DMLSHIM_CODEPAGE", raising=False)
    monkeypatch.setattr(errors, "_system_codepage", lambda: "utf-8")


@pytest.mark.parametrize("cp,text,name,byte,pos", LOCALIZED)
def test_localized_bytes_fail_utf8_as_reported(cp, text, name, byte, pos):
    exc = utf8_error(text, cp)
    assert (exc.object[exc.start], exc.start) == (byte, pos)


@pytest.mark.parametrize("cp,text,name,byte,pos", LOCALIZED)
def test_localized_message_is_decoded_and_recognised(cp, text, name, byte, pos):
    exc = utf8_error(text, cp)
    assert decode(exc.object) == (text, cp)
    err = translate(exc, op="torch.cat", args=([torch.ones(2, 3), torch.ones(0, 3)],))
    assert isinstance(err, DirectMLError) and isinstance(err, RuntimeError)
    assert err.message == text and err.codepage == cp
    assert err.hresult.name == name
    assert err.op == "torch.cat"
    assert err.inputs == ("[f32[2, 3]@cpu, f32[0, 3]@cpu]",)
    assert f"{name} (0x{err.hresult.value:08X})" in str(err) and text in str(err)


def test_codepage_env_overrides_detection(monkeypatch):
    # cp1251 bytes read as cp1252 are mojibake; the override is obeyed anyway.
    data = "Параметр задан неверно.".encode("cp1251")
    monkeypatch.setenv("DMLSHIM_CODEPAGE", "1252")
    assert decode(data) == (data.decode("cp1252"), "cp1252")
    monkeypatch.setenv("DMLSHIM_CODEPAGE", "gbk")
    assert decode("参数错误。".encode("gbk"))[1] == "gbk"


@pytest.mark.parametrize("bad", ["cp99999", "klingon", "12x"])
def test_bad_codepage_env_is_a_clear_value_error(monkeypatch, bad):
    monkeypatch.setenv("DMLSHIM_CODEPAGE", bad)
    with pytest.raises(ValueError, match=r"DMLSHIM_CODEPAGE=.*allowed: .*936"):
        errors.ansi_codepage()


def test_real_ansi_codepage_is_a_codec(monkeypatch):
    monkeypatch.undo()                       # the host's real code page
    monkeypatch.delenv("DMLSHIM_CODEPAGE", raising=False)
    assert b"abc".decode(errors.ansi_codepage()) == "abc"


@pytest.mark.parametrize("text,name,value", [
    ("The parameter is incorrect.", "E_INVALIDARG", 0x80070057),
    ("Unknown error -2147024809", "E_INVALIDARG", 0x80070057),             # WSL, row #28
    ("Unknown error -2147024882", "E_OUTOFMEMORY", 0x8007000E),
    ("failed with HRESULT 0x887A0005", "DXGI_ERROR_DEVICE_REMOVED", 0x887A0005),
    ("The GPU device instance has been suspended. Use GetDeviceRemovedReason to "
     "determine the appropriate action.", "DXGI_ERROR_DEVICE_REMOVED", 0x887A0005),
    ("Could not allocate tensor with 1048576 bytes. There is not enough GPU video "
     "memory available!", "E_OUTOFMEMORY", 0x8007000E),                     # row #26
    ("Falscher Parameter.", "E_INVALIDARG", 0x80070057),
    ("Not enough memory resources are available to complete this operation.",
     "E_OUTOFMEMORY", 0x8007000E),
    ("Not enough memory resources are available to process this command.",
     "ERROR_NOT_ENOUGH_MEMORY", 0x80070008),
    ("Unspecified error", "E_FAIL", 0x80004005),
])
def test_recognise(text, name, value):
    h = recognise(text)
    assert (h.name, h.value) == (name, value)


def test_unlisted_hresults():
    h = recognise("Unknown error -886768304")        # row #38, import on plain Linux
    assert h.value == 0xCB24FD50 and h.name == "HRESULT_0xCB24FD50" and h.retryable
    assert not recognise("failed: 0x887A0099").retryable   # an unknown DXGI error


@pytest.mark.parametrize("text", [
    "The size of tensor a (3) must match the size of tensor b (4) at non-singleton dimension 1",
    '"addmm_impl_cpu_" not implemented for \'Half\'',
    "Unknown error 5",                                # not a failure HRESULT
])
def test_torch_messages_are_not_hresults(text):
    assert recognise(text) is None
    assert translate(RuntimeError(text)) is None


@pytest.mark.parametrize("exc,kind", [
    (RuntimeError("The parameter is incorrect."), "retry"),
    (RuntimeError("Unknown error -2147024809"), "retry"),
    (RuntimeError("The GPU device does not support Double (Float64) operations!"), "retry"),
    (NotImplementedError("Could not run 'aten::_thnn_fused_lstm_cell' with arguments "
                         "from the 'CPU' backend."), "retry"),
    (RuntimeError("tensor.device().type() == at::DeviceType::PrivateUse1 INTERNAL "
                  "ASSERT FAILED"), "retry"),                                # row #10
    (RuntimeError("Could not allocate tensor with 4 bytes. There is not enough GPU "
                  "video memory available!"), "fatal"),
    (RuntimeError("The GPU device instance has been suspended. Use "
                  "GetDeviceRemovedReason to determine the appropriate action."), "fatal"),
    (RuntimeError("Unknown error -2005270523"), "fatal"),                    # 0x887A0005
    (torch.cuda.OutOfMemoryError("CUDA out of memory."), "fatal"),       # torch 2.4.1 name
    (TypeError("cat() received an invalid combination of arguments"), "other"),
    (ValueError("bad"), "other"),
    (KeyboardInterrupt(), "other"),
])
def test_classify(exc, kind):
    assert classify(exc) == kind


@pytest.mark.parametrize("cp,text,name,byte,pos", LOCALIZED)
def test_classify_unicode_decode_error(cp, text, name, byte, pos):
    fatal = name in ("E_OUTOFMEMORY", "DXGI_ERROR_DEVICE_REMOVED")
    assert classify(utf8_error(text, cp)) == ("fatal" if fatal else "retry")


def test_unrecognised_bytes_still_translate():
    with pytest.raises(UnicodeDecodeError) as info:
        b"\xff\xfe garbage".decode("utf-8")
    err = translate(info.value, op="torch.mm")
    assert err.hresult is None and err.retryable and "torch.mm()" in str(err)
    assert err.message == "\ufffd\ufffd garbage"      # replacement, never a crash
    assert classify(info.value) == "retry"


def test_error_is_picklable_and_describes_kwargs_without_values():
    x = torch.full((2, 2), 123456.0)
    err = translate(RuntimeError("The parameter is incorrect."), op="torch.add",
                    args=(x, 1.5), kwargs={"alpha": 2, "out": x.to(torch.float64)})
    assert err.inputs == ("f32[2, 2]@cpu", "out=f64[2, 2]@cpu")
    assert "123456" not in str(err)
    back = pickle.loads(pickle.dumps(err))
    assert type(back) is DirectMLError and str(back) == str(err)
    assert back.hresult == err.hresult


def test_translate_leaves_non_directml_errors_alone():
    assert translate(TypeError("x")) is None
    err = DirectMLError("The parameter is incorrect.", errors.E_INVALIDARG)
    assert translate(err) is err and classify(err) == "retry"
    assert classify(DirectMLError("x", errors.E_OUTOFMEMORY)) == "fatal"
