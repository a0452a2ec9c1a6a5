"""What runs inside each Python process started under ``dmlshim run``.

``dmlshim run`` (:mod:`dmlshim.run`) passes its options to the processes it
starts through the environment, and ``dmlshim/_sitecustomize/sitecustomize.py``
calls :func:`start` at interpreter start-up, before the program's first import:

``DMLSHIM_RUN_DEVICE``  ``emulated``: install the emulated DirectML device
                        (:mod:`dmlshim.emulation`) in this process.  Otherwise
                        ``torch_directml`` is imported when it is installed, so
                        that ``privateuseone:0`` exists for programs that never
                        import it themselves (``funasr-server --device privateuseone:0``).
``DMLSHIM_RUN_REPORT``  ``1``: print ``dmlshim.report()`` on stderr at exit.
``DMLSHIM_RUN_PID``     the PID ``dmlshim run`` started as: the main process
                        prints its report even when it is empty.

The usual ``DMLSHIM_TRACE``/``DMLSHIM_FALLBACK``/``DMLSHIM_DEVICE`` are read by
``dmlshim.activate()`` as always.
"""
from __future__ import annotations

import atexit
import importlib.util
import os
import sys
import warnings

RUN_DEVICE = "DMLSHIM_RUN_DEVICE"
RUN_REPORT = "DMLSHIM_RUN_REPORT"
RUN_PID = "DMLSHIM_RUN_PID"


def start() -> bool:
    """Install the emulated device if asked, ``dmlshim.activate()``, register the
    exit report.  Returns whether dmlshim is active.  Never raises: a failure is
    one warning on stderr and the program runs without dmlshim."""
    try:
        if os.environ.get(RUN_DEVICE) == "emulated":
            _install_emulation()
        elif importlib.util.find_spec("torch_directml") is not None:
            import torch_directml  # noqa: F401  (registers the privateuseone device with torch)
        import dmlshim

        dmlshim.activate()
    except Exception as exc:
        warnings.warn(f"dmlshim run: activation failed in {sys.argv[0] or sys.executable!r} "
                      f"({type(exc).__name__}: {exc}); this process runs without dmlshim",
                      RuntimeWarning)
        return False
    if os.environ.get(RUN_REPORT) == "1":
        atexit.register(_print_report)
    return True


def _install_emulation() -> None:
    from . import emulation

    # the emulated device takes PrivateUse1: a real torch_directml must not load beside it
    # (as in `dmlshim check`); code that asks for a device should use select_device()
    sys.modules.setdefault("torch_directml", None)
    emulation.install()


def _print_report() -> None:
    import dmlshim

    report = dmlshim.report()
    main = os.environ.get(RUN_PID) == str(os.getpid())
    if not report.rows and not main:
        return                      # a helper process that touched no device tensor
    sys.stdout.flush()
    sys.stderr.write(f"\ndmlshim report (pid {os.getpid()}, {os.path.basename(sys.argv[0] or 'python')}):\n"
                     f"{report if report.rows else 'no intercepted calls'}\n")
    sys.stderr.flush()
