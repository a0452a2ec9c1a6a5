"""``python -m dmlshim check``: would this code run on DirectML?

Runs a script (``check SCRIPT [ARGS...]``) or a function (``check
MODULE:CALLABLE``) on the emulated DirectML device (:mod:`dmlshim.emulation`,
which fails where torch-directml 0.2.5 fails) with dmlshim active, then prints a
coverage report: ops handled by dmlshim, ops that failed on the device, and silent
CPU fallbacks inside torch-directml (failure_modes.md #33, note B).
``--without-shim`` runs with ``fallback="off"``; ``--json`` / ``--output FILE``.

How the code gets the device and what each section means: docs/check.md."""
from __future__ import annotations

import argparse
import contextlib
import importlib
import json
import os
import runpy
import sys
import time
import traceback
from typing import Any, Dict, List, Optional

from .trace import STAT_HEAD, cache_lines, stat_cells, table_lines


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--without-shim", action="store_true",
                        help="run with fallback=off (dmlshim only observes): list what breaks raw")
    parser.add_argument("--fallback", choices=("auto", "known"), default="auto",
                        help="dmlshim fallback mode for the run (default: %(default)s)")
    parser.add_argument("--json", action="store_true", help="print the report as JSON")
    parser.add_argument("--output", "-o", metavar="FILE",
                        help="write the report to FILE instead of stdout")
    parser.add_argument("target", metavar="SCRIPT|MODULE:CALLABLE",
                        help="a Python script, or an importable module and a callable "
                             "taking no arguments (pkg.mod:main)")
    parser.add_argument("args", nargs=argparse.REMAINDER, metavar="ARGS",
                        help="arguments for the script (its sys.argv[1:])")


def main(args: argparse.Namespace) -> int:
    """The ``check`` subcommand: run, report, and return the run's exit status."""
    result = run(args.target, args.args, shim=not args.without_shim, fallback=args.fallback)
    text = json.dumps(result, indent=2, default=str) if args.json else format_report(result)
    if args.output:
        with open(args.output, "w", encoding="utf-8") as f:
            f.write(text + "\n")
    else:
        print(text)
    return result["exit_code"]


def run(target: str, argv: Optional[List[str]] = None, *, shim: bool = True,
        fallback: str = "auto") -> Dict[str, Any]:
    """Run ``target`` on the emulated DirectML device and collect the report.

    Returns a dict: ``target``, ``shim`` (bool), ``fallback``, ``exit_code``,
    ``error`` (None or ``{"type", "message", "where"}``), ``seconds`` (wall
    time of the run), ``handled`` (rows: op, calls, actions, seconds, h2d, d2h,
    reason), ``device_failures`` (rows: op, route, reached, failed, quirk),
    ``silent_cpu_fallbacks`` (rows: op, calls), ``caches``.
    """
    import dmlshim
    from dmlshim import emulation, trace
    from dmlshim.patches import auto

    if sys.modules.get("torch_directml") is not None:
        raise RuntimeError("dmlshim check: torch_directml is already imported in this process, "
                           "so the emulated device cannot take its place; run "
                           "`python -m dmlshim check` in a fresh process")
    emulation.install()
    fallback = fallback if shim else "off"      # off: dmlshim only observes and counts
    with _environ({"DMLSHIM_DEVICE": "directml", "DMLSHIM_FALLBACK": fallback}), _hidden("torch_directml"):
        owned = not dmlshim.is_active()
        if owned:
            dmlshim.activate(fallback=fallback)
        emulation.reset_records()
        trace.reset()
        auto.forget()
        start = time.perf_counter()
        exit_code, error = _execute(target, argv or [])
        seconds = time.perf_counter() - start
        report = dmlshim.report()
        records = emulation.records()
        failures = auto.failures()
        if owned:
            dmlshim.deactivate()
    return {
        "target": target, "argv": list(argv or []), "shim": shim,
        "fallback": fallback, "exit_code": exit_code, "error": error,
        "seconds": seconds,
        "handled": _handled(report.rows, failures),
        "device_failures": _device_failures(records),
        "silent_cpu_fallbacks": _silent_fallbacks(records),
        "caches": report.caches,
    }


@contextlib.contextmanager
def _hidden(module: str):
    """``import module`` fails inside (ImportError): on a machine with torch-directml,
    the checked code must get the emulated device, not the real one."""
    saved = sys.modules.get(module, _MISSING)
    sys.modules[module] = None
    try:
        yield
    finally:
        if saved is _MISSING:
            sys.modules.pop(module, None)
        else:
            sys.modules[module] = saved


_MISSING = object()


@contextlib.contextmanager
def _environ(values: Dict[str, str]):
    saved = {k: os.environ.get(k) for k in values}
    os.environ.update(values)
    try:
        yield
    finally:
        for k, v in saved.items():
            if v is None:
                os.environ.pop(k, None)
            else:
                os.environ[k] = v


def _execute(target: str, argv: List[str]):
    """Run the script or callable; ``(exit code, error dict or None)``."""
    saved_argv = sys.argv
    sys.argv = [target, *argv]
    try:
        if ":" in target and not os.path.exists(target):
            module, _, name = target.partition(":")
            obj = importlib.import_module(module)
            for part in name.split("."):
                obj = getattr(obj, part)
            result = obj()
            return (result if isinstance(result, int) and not isinstance(result, bool) else 0), None
        if not os.path.isfile(target):
            raise FileNotFoundError(f"check: {target!r} is neither a script file nor MODULE:CALLABLE")
        sys.path.insert(0, os.path.dirname(os.path.abspath(target)))
        try:
            runpy.run_path(target, run_name="__main__")
        finally:
            sys.path.pop(0)
        return 0, None
    except SystemExit as exc:
        code = exc.code
        return (code if isinstance(code, int) else (0 if code is None else 1)), None
    except Exception as exc:                    # the user's code failed: that is the finding
        return 1, _describe_error(exc)
    finally:
        sys.argv = saved_argv


def _describe_error(exc: BaseException) -> Dict[str, str]:
    from dmlshim import errors

    readable = errors.translate(exc) or exc
    frames = traceback.extract_tb(exc.__traceback__)
    libraries = _library_dirs()
    user = [f for f in frames if not _normalized(f.filename).startswith(libraries)]
    where = user[-1] if user else (frames[-1] if frames else None)
    return {"type": type(readable).__name__, "message": str(readable).strip()[:1000],
            "where": f"{where.filename}:{where.lineno} ({where.name})" if where else ""}


def _library_dirs() -> tuple:
    """The folders of torch and dmlshim (normalized, with a trailing separator): frames
    there are not the user's code."""
    import torch

    import dmlshim
    return tuple(os.path.join(os.path.dirname(_normalized(m.__file__)), "") for m in (torch, dmlshim))


def _normalized(path: str) -> str:
    # normcase: on Windows, case-insensitive and "/" -> "\\" (frames may use either)
    return os.path.normcase(os.path.abspath(path))


def _handled(rows: List[dict], failures: Dict[str, Any]) -> List[dict]:
    """Shim-intercepted ops that did something other than pass through
    (with ``fallback="off"``: the ones that raised, action ``error``)."""
    out = []
    for r in rows:
        acted = {k: v for k, v in r["actions"].items() if k != "pass"}
        if not acted:
            continue
        f = failures.get(r["op"])
        out.append({"op": r["op"], "calls": r["calls"], "actions": acted,
                    "seconds": r["seconds"], "own": r["own"], "substitute": r["substitute"],
                    "overhead": r["overhead"], "h2d": r["h2d"], "d2h": r["d2h"],
                    "reason": f.error if f is not None else ""})
    return out


def _device_failures(records: Dict[str, dict]) -> List[dict]:
    from dmlshim import emulation

    return sorted(({"op": op, "route": emulation.route(op), "reached": r["reached"],
                    "failed": r["failed"], "quirk": r["quirk"]}
                   for op, r in records.items() if r["failed"] or r["quirk"]),
                  key=lambda r: -(r["failed"] + r["quirk"]))


def _silent_fallbacks(records: Dict[str, dict]) -> List[dict]:
    return sorted(({"op": op, "calls": r["cpu_fallback"]}
                   for op, r in records.items() if r["cpu_fallback"]),
                  key=lambda r: -r["calls"])


def format_report(result: Dict[str, Any]) -> str:
    """The human-readable report of :func:`run`'s result."""
    mode = f"dmlshim fallback={result['fallback']}" if result["shim"] else "WITHOUT dmlshim"
    lines = [f"dmlshim check: {result['target']} on the emulated DirectML device "
             f"(torch-directml 0.2.5 behaviour), {mode}"]
    status = "completed" if result["exit_code"] == 0 else f"exit status {result['exit_code']}"
    lines.append(f"run: {status} in {result['seconds']:.2f} s")
    if result["error"]:
        e = result["error"]
        lines.append(f"  stopped by {e['type']}: {e['message'].splitlines()[0] if e['message'] else ''}")
        if e["where"]:
            lines.append(f"  at {e['where']}")

    lines.append("")
    if result["shim"] or result["handled"]:
        lines.append("Handled by dmlshim (would fail or be wrong on DirectML without it):"
                     if result["shim"] else "Intercepted calls that raised (dmlshim observing only):")
        if result["handled"]:
            rows = [(*stat_cells(r), r["reason"][:80]) for r in result["handled"]]
            lines += table_lines((*STAT_HEAD, "why"), rows, "  ")
        else:
            lines.append("  nothing: no call needed a fix")
        lines += cache_lines(result["caches"], "  ")
        lines.append("")

    lines.append("Failed on the device (aten op: raised, or 'quirk' = silently wrong result):")
    if result["device_failures"]:
        rows = [(r["op"], r["route"], r["reached"], r["failed"], r["quirk"])
                for r in result["device_failures"]]
        lines += table_lines(("aten op", "route (tdml 0.2.5)", "calls", "failed", "quirk"), rows, "  ")
        if result["shim"]:
            lines.append("  (failures above were recovered by dmlshim unless the run stopped)")
    else:
        lines.append("  none")

    lines.append("")
    lines.append("Silent CPU fallbacks inside torch-directml (correct but slow; warned once per "
                 "process):")
    if result["silent_cpu_fallbacks"]:
        lines += table_lines(("aten op", "calls"),
                             [(r["op"], r["calls"]) for r in result["silent_cpu_fallbacks"]], "  ")
    else:
        lines.append("  none")
    return "\n".join(lines)
