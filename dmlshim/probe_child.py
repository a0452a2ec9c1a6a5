"""Probes in a child process: a probe that ends the process ends only its child.

On the real torch-directml binary some probes end the whole process: with
``VKD3D_TILED_RESOURCES=0`` a raw ``torch.eye(3, device=d)`` (torch-directml's CPU fallback
for ``eye.m_out``, the ``fallback_out`` probe) ends it with SIGSEGV (issue 50, measured on
the real binary).  A worker thread does not contain that, so the first probing of a real
adapter (``probing.detect()`` with no usable cache) runs here: :func:`probe_in_children`
starts a child Python running :func:`main`, which selects the same device and prints one JSON
line as each probe starts and one with its verdict.  A probe that ends the child is a
broken verdict ``"ends the process (SIGSEGV)"`` (so its fix goes on), one still running at
its deadline is killed (``"timed out after 10 s"``); the probes after it run in a fresh
child.  Docs: docs/defects.md ("The first probing runs in a child process").

Child command line (:func:`main`'s arguments; ``python -m dmlshim.probe_child`` by hand):
``--device directml:0|emulated [--defects module:ATTRIBUTE] [NAME ...]`` (default: every probe of
``dmlshim.catalogue:DEFECTS``; ``emulated``: ``dmlshim.emulation.install()``, default rules).
"""
from __future__ import annotations

import argparse
import importlib
import json
import os
import queue
import signal
import subprocess
import sys
import tempfile
import threading
import time
import warnings
from typing import Callable, Dict, Mapping, Optional, Sequence

import torch

from .catalogue.defect import Verdict

DEFECTS = "dmlshim.catalogue:DEFECTS"
STARTUP = 120.0        # seconds a child may take to import torch and select its device
ENDS = "ends the process"
# `dmlshim run`'s start-up hook (dmlshim/_sitecustomize) would activate dmlshim in the child,
# whose activate() would probe in a child of its own
_BOOTSTRAP = os.path.join(os.path.dirname(os.path.abspath(__file__)), "_sitecustomize")


class ChildError(RuntimeError):
    """A child could not be started, or ended or hung before its first probe."""


def verdict_of(probe: Callable[[torch.device], Verdict], device) -> Verdict:
    """``probe(device)``; an exception (any, ``FatalDirectMLError`` included) is a broken
    verdict whose figure is its first line."""
    try:
        return probe(device)
    except BaseException as exc:                      # the error *is* the verdict
        text = str(exc).strip().splitlines()
        return Verdict(True, f"{type(exc).__name__}: {text[0][:200] if text else ''}")


def device_spec(device: torch.device) -> str:
    """The child's ``--device`` for ``device``: ``"directml:<index>"`` when torch_directml is
    loaded, ``"emulated"`` when dmlshim's emulated device is installed.

    Raises:
        ChildError: neither (a child could not select the device)."""
    if device.type == "privateuseone":
        if sys.modules.get("torch_directml") is not None:
            return f"directml:{device.index or 0}"
        emulation = sys.modules.get("dmlshim.emulation")
        if emulation is not None and emulation.is_installed():
            return "emulated"
    raise ChildError(f"a child process cannot select {device}")


def probe_in_children(names: Sequence[str], device: str, timeout: float, *,
                      defects: str = DEFECTS, startup: float = STARTUP) -> Dict[str, Verdict]:
    """Run the probes ``names`` (of the defects ``defects``, ``"module:ATTRIBUTE"``) on
    ``device`` (``"directml:<index>"`` or ``"emulated"``) in child processes, in order.

    Each probe gets ``timeout`` seconds from its start, a child ``startup`` seconds until its
    first probe starts.  A probe that ends its child (a signal, an exit) is
    ``Verdict(True, "ends the process (SIGSEGV)")``, one killed at its deadline
    ``Verdict(True, "timed out after 10 s")``; the rest run in a fresh child.

    Returns:
        name -> verdict, for every name.

    Raises:
        ChildError: no child can be started here (a frozen interpreter, no
            ``sys.executable``), or one ended or hung before its first probe (the message
            ends with its stderr).
    """
    if getattr(sys, "frozen", False) or not sys.executable:
        raise ChildError("no Python interpreter to start a child with (sys.executable is "
                         f"{sys.executable!r}{', frozen' if getattr(sys, 'frozen', False) else ''})")
    verdicts: Dict[str, Verdict] = {}
    while len(verdicts) < len(names):
        verdicts.update(_one_child([n for n in names if n not in verdicts], device, defects, timeout, startup))
    return verdicts


def _one_child(names, device, defects, timeout, startup) -> Dict[str, Verdict]:
    """The verdicts one child gives before it ends (at least one)."""
    root = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))      # the child imports this dmlshim
    paths = [p for p in os.environ.get("PYTHONPATH", "").split(os.pathsep)
             if p and os.path.abspath(p) != _BOOTSTRAP]
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([root, *paths])}
    # -c, not -m: dmlshim's __init__ imports this module, which -m would then run a second time
    command = [sys.executable, "-c", "import sys; from dmlshim.probe_child import main; sys.exit(main())",
               "--device", device, "--defects", defects, *names]
    got: Dict[str, Verdict] = {}
    running, lines = None, queue.Queue()
    with tempfile.TemporaryFile() as errors:
        try:
            child = subprocess.Popen(command, stdin=subprocess.DEVNULL, stdout=subprocess.PIPE, stderr=errors,
                                     env=env, text=True, encoding="utf-8", errors="replace")
        except OSError as exc:
            raise ChildError(f"cannot start {sys.executable}: {exc}") from None
        reader = threading.Thread(target=_read, args=(child.stdout, lines), daemon=True)
        reader.start()
        deadline = time.monotonic() + startup
        try:
            while True:
                try:
                    line = lines.get(timeout=max(0.0, deadline - time.monotonic()))
                except queue.Empty:                   # hung: the probe running, or the start-up
                    child.kill()
                    if running is None and not got:
                        raise ChildError(f"no probe started within {startup:g} s{_tail(errors)}") from None
                    if running is not None:
                        got[running] = Verdict(True, f"timed out after {timeout:g} s")
                    return got
                if line is None:
                    break
                try:
                    message = json.loads(line)
                except ValueError:
                    message = None
                if not isinstance(message, dict):
                    continue                          # not ours: something a probe printed
                if message.get("start") in names:
                    running, deadline = message["start"], time.monotonic() + timeout
                elif running is not None and message.get("name") == running:
                    got[running], running = Verdict(bool(message["broken"]), str(message["figure"])), None
        finally:
            if child.poll() is None:
                child.kill()
            rc = child.wait()
            reader.join(5.0)
            child.stdout.close()
        if running is not None:
            got[running] = Verdict(True, f"{ENDS} ({_how(rc)})")
        elif not got:
            raise ChildError(f"the probing child ended ({_how(rc)}) before its first probe{_tail(errors)}")
    return got


def _read(stream, lines: queue.Queue) -> None:
    for line in stream:
        lines.put(line)
    lines.put(None)


def _how(rc: int) -> str:
    """A child's end, from its return code: ``"SIGSEGV"``, ``"exit code 1"``,
    ``"exit code 0xC0000005"`` (Windows)."""
    if rc < 0:
        try:
            return signal.Signals(-rc).name
        except ValueError:
            return f"signal {-rc}"
    return f"exit code {rc}" if rc < 256 else f"exit code 0x{rc & 0xFFFFFFFF:08X}"


def _tail(errors) -> str:
    errors.seek(0)
    text = errors.read()[-600:].decode("utf-8", "replace").strip()
    return f"; its stderr ends: {text}" if text else ""


def ended_the_process(figures: Mapping[str, str]) -> Dict[str, str]:
    """name -> how (``"SIGSEGV"``) for the verdict figures (name -> figure) of the probes that
    ended their child process."""
    return {name: figure[len(ENDS) + 2:-1] for name, figure in figures.items()
            if figure.startswith(ENDS + " (")}


# ------------------------------------------------------------------------- the child

def _select(spec: str) -> torch.device:
    if spec == "emulated":
        from . import emulation
        return emulation.install()
    kind, _, index = spec.partition(":")
    if kind != "directml":
        raise ValueError(f"--device {spec!r}: allowed are directml:<index> and emulated")
    import torch_directml
    return torch_directml.device(int(index or 0))


def main(argv: Optional[Sequence[str]] = None) -> int:
    """The child: select the device, then per probe print ``{"start": name}`` and
    ``{"name", "broken", "figure"}``, one JSON line each, flushed."""
    parser = argparse.ArgumentParser(prog="python -m dmlshim.probe_child")
    parser.add_argument("--device", required=True, help="directml:<index> | emulated")
    parser.add_argument("--defects", default=DEFECTS, help=f"module:ATTRIBUTE (default {DEFECTS})")
    parser.add_argument("names", nargs="*", help="the probes to run, in order (default: all)")
    args = parser.parse_args(argv)
    out = os.fdopen(os.dup(1), "w", encoding="utf-8")
    os.dup2(2, 1)                    # what a probe or a library prints goes to stderr, not into the protocol
    warnings.simplefilter("ignore")  # torch-directml's CPU-fallback warnings
    module, _, attribute = args.defects.partition(":")
    defects = {d.name: d for d in getattr(importlib.import_module(module), attribute) if d.probe is not None}
    unknown = [n for n in args.names if n not in defects]
    if unknown:
        parser.error(f"no probe named {', '.join(unknown)} in {args.defects}")
    device = _select(args.device)
    for name in args.names or list(defects):
        out.write(json.dumps({"start": name}) + "\n")
        out.flush()
        verdict = verdict_of(defects[name].probe, device)
        out.write(json.dumps({"name": name, "broken": verdict.broken, "figure": verdict.figure}) + "\n")
        out.flush()
    return 0


if __name__ == "__main__":
    sys.exit(main())
