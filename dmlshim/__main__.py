"""Command line: ``python -m dmlshim info | gate | doctor | check | run | conformance`` (subcommands register in ``COMMANDS``).

Each subcommand is a function ``(args) -> exit code`` plus an ``add_<name>_arguments``
style setup; add one by writing both and listing it in ``COMMANDS``.
"""
from __future__ import annotations

import argparse
import json
import os
import sys
from typing import Callable, Dict, List, Optional, Tuple

from . import _torch_compat, check, conformance, doctor, generate, run
from .realdml import cli as realdml_cli


def _info_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--json", action="store_true", help="print machine-readable JSON")


def info(args: argparse.Namespace) -> int:
    """Versions, backends, DirectML adapters with float64 support, patches."""
    import dmlshim
    from dmlshim import devices, patches, trace

    data = devices.info()
    data["dmlshim"] = dmlshim.__version__
    data["active"] = dmlshim.is_active()
    data["installed_patches"] = patches.installed()
    cfg = dmlshim.settings()
    data["settings"] = None if cfg is None else {"target": cfg.target, "fallback": cfg.fallback,
                                                 "trace": cfg.trace}
    data["registered_patches"] = [{"name": p.name, "doc": p.doc, "imports": list(p.imports)}
                                  for p in patches.REGISTRY]
    data["defects"] = _detection(cfg).to_dict()
    data["gate"] = _gate_report(cfg, data["defects"]["device"] is not None)
    data["torch_internals_missing"] = _torch_compat.check()
    if args.json:
        print(json.dumps(data, indent=2))
        return 0
    print(f"dmlshim        {data['dmlshim']}")
    print(f"torch          {data['torch']}")
    print(f"torch-directml {data['torch_directml'] or 'not installed'}")
    print("backends       " + "  ".join(f"{k}={'yes' if v else 'no'}" for k, v in data["available"].items()))
    print(f"selected       {data['selected']}")
    if data["directml_adapters"]:
        for a in data["directml_adapters"]:
            print(f"DirectML {a['index']}     {a['name']} (float64: {'yes' if a['float64'] else 'no'})")
    else:
        print("DirectML       no adapter (torch-directml missing or no DirectX 12 GPU): patches stay dormant")
    for k, v in data["env"].items():
        print(f"env            {k}={v}")
    if data["settings"]:
        st = data["settings"]
        print(f"active         yes (target={st['target']}, fallback={st['fallback']}, "
              f"trace={st['trace'] or 'off'}): {', '.join(data['installed_patches']) or 'no patch'}")
    else:
        print("active         no")
    print(f"gate           {_gate_line(data['gate'])}")
    print(f"torch internals: {_torch_compat.report_line(data['torch_internals_missing'])}")
    print("\n".join(trace.defect_lines(data["defects"])))
    print("patches (registry; installed by dmlshim.activate()):")
    for p in patches.REGISTRY:
        lazy = f" [on import of {', '.join(p.imports)}]" if p.imports else ""
        print(f"  {p.name:<9} {p.doc}{lazy}")
    return 0


def _detection(cfg):
    """The active shim's probe verdicts, else what ``activate()`` would find now."""
    from dmlshim import config, probing

    if cfg is not None and probing.last() is not None:
        return probing.last()
    return probing.detect(config.DEFAULT_TARGET, config.parse_probe(os.environ.get("DMLSHIM_PROBE", "auto")))


def _gate_report(cfg, device_present: bool) -> dict:
    from dmlshim.patches import _gate
    return _gate.report(cfg.gate if cfg is not None else None, device_present)


def _gate_line(report: dict) -> str:
    from dmlshim.patches import _gate
    return _gate.report_line(report)


def _gate_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--rebuild", action="store_true",
                        help="forget a failed build and build the compiled gate now (shows the compiler's error)")
    parser.add_argument("--json", action="store_true", help="print machine-readable JSON")


def gate(args: argparse.Namespace) -> int:
    """Which gate runs dmlshim's kernels; ``--rebuild``: build it now.  Exit 1 when a
    rebuild gives no compiled gate."""
    import logging

    from dmlshim.patches import _gate

    if args.rebuild:
        logging.basicConfig(level=logging.WARNING, format="%(message)s")    # the build's progress
        _gate.retry()
    state = _gate_report(None, True)
    if args.json:
        print(json.dumps(state, indent=2))
    else:
        print(f"gate           {_gate_line(state)}")
    return 1 if args.rebuild and state["kind"] != "compiled" else 0


# name -> (help, add-arguments, run)
COMMANDS: Dict[str, Tuple[str, Callable[[argparse.ArgumentParser], None], Callable[[argparse.Namespace], int]]] = {
    "info": ("versions, devices, float64 support, patches", _info_arguments, info),
    "gate": ("which gate runs dmlshim's kernels (compiled: prebuilt or built here; Python) and why; "
             "--rebuild builds it now", _gate_arguments, gate),
    "doctor": ("probe every known DirectML defect on a device, run a short conformance pass, "
               "write a JSON field report: the first thing to run on a new GPU",
               doctor.add_arguments, doctor.main),
    "check": ("run a script or MODULE:CALLABLE on the emulated DirectML device; report what "
              "would fail, how dmlshim handles it, and silent CPU fallbacks",
              check.add_arguments, check.main),
    "run": ("run a script, -m module or installed program (funasr-server ...) with dmlshim "
            "active in it and in its child Python processes", run.add_arguments, run.main),
    "conformance": ("run PyTorch's OpInfo samples on the emulated DirectML device, raw and "
                    "with dmlshim; count those that match the CPU, by failure class",
                    conformance.add_arguments, conformance.main),
    "generate": ("for developers: write the registry's import list and docs/defects.md's tables from "
                 "the code (--check: exit 1 if stale)", generate.add_arguments, generate.main),
    "realdml": ("build and use the real torch-directml 0.2.5 on Linux without a GPU: "
                "build | run -- CMD | env | info", realdml_cli.add_arguments, realdml_cli.main),
}


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="python -m dmlshim",
                                     description="Run real PyTorch models on DirectML with the CPU's outputs.")
    sub = parser.add_subparsers(dest="command", metavar="COMMAND", required=True)
    for name, (help_, add_arguments, command) in COMMANDS.items():
        p = sub.add_parser(name, help=help_, description=help_)
        add_arguments(p)
        p.set_defaults(run=command)
    return parser


def main(argv: Optional[List[str]] = None) -> int:
    args = build_parser().parse_args(argv)
    return args.run(args)


if __name__ == "__main__":
    sys.exit(main())
