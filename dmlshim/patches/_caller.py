"""Warnings raised inside a wrapped call point at the caller's line, as without dmlshim.

A warning names the frame ``stacklevel`` levels above its ``warn``: a C++ ``TORCH_WARN``
the Python frame that called the op (level 1), ``torch.load``'s ``FutureWarning`` its
caller (level 2).  Inside a dmlshim wrapper (``_wrap``, ``auto``, the dispatcher's
kernels) that frame is dmlshim's: ``patches/load.py:161: FutureWarning``.  Catching
warnings around every wrapped call (``warnings.catch_warnings``) would cost microseconds
per call on about 2,700 attributes and is not thread-safe; instead one hook in front of
every shown warning (``warnings._showwarnmsg``, which ``catch_warnings`` and pytest leave
in place) re-issues a warning located in dmlshim at the first frame outside it.  A call
that does not warn pays nothing.
"""
from __future__ import annotations

import os
import sys
import warnings

import wrapt

# dmlshim's frames, and wrapt's where its C extension is missing (its Python wrappers)
_DMLSHIM = os.path.dirname(os.path.dirname(os.path.abspath(__file__))) + os.sep
_SKIPPED = (_DMLSHIM, os.path.dirname(os.path.abspath(wrapt.__file__)) + os.sep)
_shown = None                          # warnings._showwarnmsg before install()


def _caller(msg, frame):
    """``(located, caller)``: the frame ``msg`` names, found outward from ``frame``, and
    the first frame beyond it outside dmlshim; None when either is not on the stack (a
    warning of another thread's, or given its location explicitly)."""
    while frame is not None and (frame.f_code.co_filename, frame.f_lineno) != (msg.filename, msg.lineno):
        frame = frame.f_back
    located = frame
    while frame is not None and frame.f_code.co_filename.startswith(_SKIPPED):
        frame = frame.f_back
    return None if located is None or frame is None else (located, frame)


def _reissue(msg, located, caller) -> None:
    """``msg`` again, at ``caller``'s line, judged by the filters and registries there."""
    text, category = str(msg.message), msg.category
    # it passed the filters at dmlshim's line, and "default"/"module"/"once" remembered
    # that line: forget it, or the caller's next line with this warning would be silent
    registry = located.f_globals.get("__warningregistry__")
    if registry:
        registry.pop((text, category, msg.lineno), None)
        registry.pop((text, category, 0), None)
    warnings.onceregistry.pop((text, category), None)
    globals_ = caller.f_globals
    warnings.warn_explicit(msg.message, category, caller.f_code.co_filename, caller.f_lineno,
                           module=globals_.get("__name__"),
                           registry=globals_.setdefault("__warningregistry__", {}),
                           module_globals=globals_, source=msg.source)


def _showwarnmsg(msg) -> None:
    found = _caller(msg, sys._getframe(1)) if msg.filename.startswith(_DMLSHIM) else None
    if found is None:
        _shown(msg)
    else:
        _reissue(msg, *found)


def install() -> None:
    """Put the hook in front of ``warnings._showwarnmsg`` (again: nothing)."""
    global _shown
    if warnings._showwarnmsg is not _showwarnmsg:
        _shown, warnings._showwarnmsg = warnings._showwarnmsg, _showwarnmsg


def uninstall() -> None:
    """Take the hook out, unless someone replaced it since."""
    if warnings._showwarnmsg is _showwarnmsg:
        warnings._showwarnmsg = _shown
