"""``python -m dmlshim doctor``: what this GPU gets wrong, as a field report.

Runs every defect probe (``dmlshim.catalogue``, fresh: the cache is rewritten), then a
time-bounded conformance pass (``dmlshim.conformance`` samples run raw on the device),
prints a table and optionally writes a JSON report: device, driver, versions, each
verdict with its figure, and the conformance failure classes.  The first thing to run
on a new GPU (docs/defects.md).
"""
from __future__ import annotations

import argparse
import json
import platform
import time
from collections import Counter

import torch

from . import _torch_compat

DEVICES = ("directml", "emulated", "cuda", "xpu", "mps")
# the OpInfos of the conformance pass: common ops of real models first
DEFAULT_OPS = r"^(add|mul|sub|div|matmul|mm|bmm|addmm|cat|stack|index_select|gather|where|softmax|" \
              r"log_softmax|layer_norm|sum|mean|cumsum|sigmoid|tanh|exp|log|nn\.functional\.(conv1d|" \
              r"conv2d|linear|pad|interpolate|gelu|relu|silu|embedding|dropout|cross_entropy))$"


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--device", default="directml", choices=DEVICES,
                        help="the device to examine (emulated: install dmlshim's emulated DirectML device)")
    parser.add_argument("--json", metavar="FILE", help="write the field report to FILE")
    parser.add_argument("--seconds", type=float, default=60.0,
                        help="time budget of the conformance pass (0 skips it; default 60)")
    parser.add_argument("--ops", default=DEFAULT_OPS, metavar="REGEX",
                        help="OpInfos of the conformance pass (default: common model ops)")
    parser.add_argument("--explain", metavar="NAME",
                        help="probe nothing: print where defect NAME's probe, fixes, emulator rules, "
                             "tests and docs live")


def _target(name: str) -> str:
    if name == "emulated":
        from . import emulation
        emulation.install()
        return "privateuseone"
    return "privateuseone" if name == "directml" else name


def examine(device: str = "directml", seconds: float = 60.0, ops: str = DEFAULT_OPS) -> dict:
    """Probe ``device`` (one of :data:`DEVICES`) and run the conformance pass.

    Returns:
        the field report (a JSON-ready dict).

    Raises:
        ValueError: an unknown ``device``.
        RuntimeError: no such device is present here.
    """
    if device not in DEVICES:
        raise ValueError(f"device={device!r}: allowed values are {', '.join(DEVICES)}")
    from . import __version__, devices, probe_child, probing

    target = _target(device)
    detection = probing.detect(target, "refresh")
    if detection.device is None:
        raise RuntimeError(f"no {device} device is present here (python -m dmlshim info lists "
                           "what is); --device emulated examines dmlshim's emulated DirectML device")
    dml = devices._torch_directml() if target == "privateuseone" and device != "emulated" else None
    return {
        "device": detection.device, "adapter": detection.adapter,
        "driver": devices.driver_version(detection.adapter) if dml is not None else None,
        "emulated": device == "emulated",
        "float64": devices.has_float64_support(detection.device),
        "versions": {"dmlshim": __version__, "torch": torch.__version__,
                     "torch_directml": devices.torch_directml_version(dml),
                     "python": platform.python_version(), "os": platform.platform()},
        "probes": detection.to_dict(),
        # name -> how ("SIGSEGV"): probes run in a child process (dmlshim.probe_child) that ended it
        "ended_child_process": probe_child.ended_the_process({r["name"]: r["figure"] for r in detection.rows()}),
        "conformance": conformance_pass(torch.device(detection.device), seconds, ops),
        "gate": _gate_state(),
        "torch_internals_missing": _torch_compat.check(),
        "date": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
    }


def _gate_state() -> dict:
    import dmlshim
    from .patches import _gate
    cfg = dmlshim.settings()
    return _gate.report(cfg.gate if cfg is not None else None, True)


def conformance_pass(device: torch.device, seconds: float, ops: str) -> dict:
    """OpInfo samples (float32, 2 per op) run raw on ``device`` until ``seconds`` run
    out: counts per failure class (``dmlshim.conformance.CLASSES``) and the failures."""
    if seconds <= 0:
        return {"skipped": True}
    from . import conformance
    import dmlshim

    start = time.perf_counter()
    try:
        collected = conformance.collect(ops, dtypes=("float32",), samples=2)
    except ImportError as exc:
        return {"skipped": True, "reason": f"{exc} (pip install 'dmlshim[conformance]')"}
    was_active = dmlshim.is_active()
    dmlshim.deactivate()                      # raw: what the device itself does
    counts, failures, ran = Counter(), [], 0
    try:
        for case in collected.cases:
            if time.perf_counter() - start > seconds:
                break
            result = conformance.run_sample(case, device)
            counts[result.cls] += 1
            ran += 1
            if result.cls not in conformance.PARITY:
                failures.append({"op": case.op, "variant": case.variant, "index": case.index,
                                 "class": result.cls, "message": result.message})
    finally:
        if was_active:
            dmlshim.activate()
    return {"ops": ops, "samples": len(collected.cases), "ran": ran,
            "seconds": round(time.perf_counter() - start, 2),
            "classes": {c: counts[c] for c in conformance.CLASSES if counts[c]}, "failures": failures}


def format_report(report: dict) -> str:
    from .trace import defect_lines
    lines = [f"device   {report['device']} ({report['adapter']})",
             f"driver   {report['driver'] or 'unknown'}   float64: {'yes' if report['float64'] else 'no'}",
             "versions " + "  ".join(f"{k}={v}" for k, v in report["versions"].items() if v)]
    if "gate" in report:
        from .patches import _gate
        lines.append(f"gate     {_gate.report_line(report['gate'])}")
    if "torch_internals_missing" in report:
        lines.append(f"torch internals: {_torch_compat.report_line(report['torch_internals_missing'])}")
    lines += defect_lines(report["probes"])
    if report.get("ended_child_process"):
        lines.append("probes that ended their child process: "
                     + ", ".join(f"{n} ({how})" for n, how in report["ended_child_process"].items()))
    conf = report["conformance"]
    if conf.get("skipped"):
        lines.append(f"conformance: skipped {conf.get('reason', '')}".rstrip())
    else:
        lines.append(f"conformance (raw, {conf['ran']}/{conf['samples']} samples in {conf['seconds']} s): "
                     + "  ".join(f"{k}={v}" for k, v in conf["classes"].items()))
        for f in conf["failures"][:20]:
            lines.append(f"  {f['class']:<12} {f['op']}{'.' + f['variant'] if f['variant'] else ''}"
                         f"[{f['index']}]: {f['message'][:80]}")
    return "\n".join(lines)


def explain(name: str) -> int:
    """Print where everything about defect ``name`` lives (docs/defects.md#NAME and the rest)."""
    from .catalogue import where
    try:
        print(where.explain(name))
    except KeyError as exc:
        print(f"dmlshim doctor: {exc.args[0]}")
        return 2
    return 0


def main(args: argparse.Namespace) -> int:
    if args.explain:
        return explain(args.explain)
    try:
        report = examine(args.device, args.seconds, args.ops)
    except (RuntimeError, ValueError) as exc:
        print(f"dmlshim doctor: {exc}")
        return 2
    print(format_report(report))
    if args.json:
        with open(args.json, "w", encoding="utf-8") as f:
            json.dump(report, f, indent=2)
        print(f"field report written to {args.json}")
    return 0
