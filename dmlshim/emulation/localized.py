"""DirectML's HRESULT messages as Windows prints them in other languages.

On Windows, torch-directml formats HRESULTs with ``FormatMessageA``, i.e. in
the system ANSI code page, and Python then decodes the bytes as UTF-8. On a
Chinese (GBK) system E_INVALIDARG therefore surfaces as
``UnicodeDecodeError: 'utf-8' codec can't decode byte 0xb2 in position 0``
instead of "The parameter is incorrect." (failure_modes.md row #4, note A;
city96/ComfyUI-GGUF#70). :func:`localize` reproduces that: it decodes the
localized bytes as UTF-8 exactly as Python does, so the exception (byte,
position, reason, ``exc.object``) is the real one.
"""
import codecs

E_INVALIDARG = 0x80070057
E_OUTOFMEMORY = 0x8007000E
E_FAIL = 0x80004005

#: English system text of each HRESULT (what an English Windows prints).
ENGLISH = {
    E_INVALIDARG: "The parameter is incorrect.",
    E_OUTOFMEMORY: "Not enough memory resources are available to complete this operation.",
    E_FAIL: "Unspecified error",
}

#: Localized system texts by Windows ANSI code page (failure_modes.md note A).
MESSAGES = {
    "cp936": {   # zh-CN (GBK)
        E_INVALIDARG: "参数错误。",
        E_OUTOFMEMORY: "存储空间不足，无法完成此操作。",
        E_FAIL: "未指定的错误",
    },
    "cp950": {E_INVALIDARG: "參數錯誤。"},                       # zh-TW (Big5)
    "cp932": {E_INVALIDARG: "パラメーターが間違っています。"},    # ja (Shift-JIS)
    "cp949": {E_INVALIDARG: "매개 변수가 틀립니다."},             # ko
    "cp1251": {E_INVALIDARG: "Параметр задан неверно."},         # ru
}

_BY_TEXT = {text: code for code, text in ENGLISH.items()}


def codepage(name):
    """Canonical code-page name (``"cp936"`` for ``"gbk"``, ``936`` or ``"CP936"``).

    Raises:
        ValueError: ``name`` is not a codec Python knows.
    """
    text = f"cp{name}" if isinstance(name, int) else str(name)
    try:
        canonical = codecs.lookup(text).name
    except LookupError:
        raise ValueError(f"localized_errors={name!r} is not a known code page; "
                         f"use a Windows code page such as {', '.join(MESSAGES)}") from None
    aliases = {"gbk": "cp936", "big5": "cp950", "shift_jis": "cp932", "euc_kr": "cp949"}
    return aliases.get(canonical, canonical)


def hresult_of(message):
    """The HRESULT whose English text is ``message``, else ``None``."""
    return _BY_TEXT.get(message)


def localize(exc, page):
    """The exception Python raises for ``exc`` on a Windows with ANSI code page ``page``.

    Returns ``exc`` itself when its text is not an HRESULT message or the code
    page's text is unknown (or plain ASCII, as on English Windows); otherwise
    the ``UnicodeDecodeError`` of decoding the localized bytes as UTF-8.
    """
    code = hresult_of(str(exc))
    text = MESSAGES.get(page, {}).get(code) if code is not None else None
    if text is None:
        return exc
    try:
        text.encode(page).decode("utf-8")
    except UnicodeDecodeError as decode_error:
        return decode_error
    return exc
