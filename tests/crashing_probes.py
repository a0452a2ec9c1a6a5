"""Probes for tests/test_probe_child.py, run by ``python -m dmlshim.probe_child --defects
crashing_probes:DEFECTS`` (tests/ on the child's PYTHONPATH): one returns a verdict, one ends
its process with SIGSEGV, one returns after it, one hangs."""
import os
import signal
import time

from dmlshim.catalogue import Defect, Verdict


def _fine(device):
    return Verdict(False, f"equal on {device.type}")


def _segfault(device):
    os.kill(os.getpid(), signal.SIGSEGV)
    time.sleep(5)                                    # the signal arrives


def _after(device):
    return Verdict(True, "max |Δ| 1")


def _hangs(device):
    time.sleep(60)


DEFECTS = tuple(Defect(name, "#0", "tests", name, probe) for name, probe in
                (("fine", _fine), ("segfault", _segfault), ("after", _after), ("hangs", _hangs)))
