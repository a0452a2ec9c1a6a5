"""Start-up hook of ``dmlshim run`` (see :mod:`dmlshim.bootstrap`).

Python imports this file at start-up because ``dmlshim run`` put its folder first
on ``PYTHONPATH``.  It activates dmlshim, then loads the ``sitecustomize`` it
shadows, if any (the way ddtrace-run's bootstrap does).  It never stops the
program: a failure is one warning on stderr, and the program runs unshimmed.
"""
import os
import sys


def _activate():
    try:
        from dmlshim import bootstrap
    except Exception as exc:    # e.g. a child Python of another environment, without dmlshim
        sys.stderr.write(f"dmlshim run: dmlshim cannot be imported by {sys.executable} "
                         f"({exc!r}); this process runs without it\n")
        return
    bootstrap.start()


def _load_shadowed():
    """Import the next ``sitecustomize`` on ``sys.path``, as if ours were not there."""
    here = os.path.dirname(os.path.abspath(__file__))
    index = next((i for i, p in enumerate(sys.path) if p and os.path.abspath(p) == here), None)
    if index is None:
        return
    ours = sys.modules.pop("sitecustomize", None)
    del sys.path[index]
    try:
        import sitecustomize  # noqa: F401  (the user's or the distribution's)
    except ImportError as exc:
        if exc.name != "sitecustomize":         # theirs exists but failed: say so, as site does
            sys.stderr.write(f"Error in sitecustomize; set PYTHONVERBOSE for traceback:\n{exc!r}\n")
        if ours is not None:
            sys.modules["sitecustomize"] = ours
    except Exception as exc:
        sys.stderr.write(f"Error in sitecustomize; set PYTHONVERBOSE for traceback:\n{exc!r}\n")
    finally:
        sys.path.insert(index, here)


_activate()
_load_shadowed()
