"""dmlshim's cache folder (``platformdirs.user_cache_dir("dmlshim")``): the probe verdicts
(``probing``) and the record of failed builds (``cpp_build``), each written whole or not at all."""
from __future__ import annotations

import json
import os


def folder() -> str:
    """The folder: ``~/.cache/dmlshim`` on Linux, ``%LOCALAPPDATA%\\dmlshim\\Cache`` on Windows."""
    import platformdirs
    return platformdirs.user_cache_dir("dmlshim", appauthor=False)


def write_json(path: str, data) -> None:
    """``data`` as JSON at ``path``, atomically (a temp file, then ``os.replace``).

    Raises:
        OSError: the folder or the file cannot be written.
    """
    os.makedirs(os.path.dirname(path), exist_ok=True)
    tmp = f"{path}.{os.getpid()}.tmp"
    with open(tmp, "w", encoding="utf-8") as f:
        json.dump(data, f, indent=1)
    os.replace(tmp, path)
