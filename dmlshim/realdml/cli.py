"""``python -m dmlshim realdml build | run | env | info``: the real torch-directml on Linux."""
from __future__ import annotations

import argparse
import json
import sys

from . import stack as stack_module
from .build import BuildError, build as build_stack
from .sources import SourceError
from .stack import NoBuild


def add_arguments(parser: argparse.ArgumentParser) -> None:
    sub = parser.add_subparsers(dest="realdml_command", metavar="{build,run,env,info}", required=True)
    b = sub.add_parser("build", help="build the stack into the user cache (seconds when already built)")
    b.add_argument("--sources", metavar="DIR",
                   help="folder with the files SHA256SUMS names (default $DMLSHIM_REALDML_SOURCES; "
                        "CI: ../shared/realdml)")
    b.add_argument("--jobs", type=_positive, metavar="N", help="parallel compile jobs (default: all CPUs)")
    r = sub.add_parser("run", help="run a command on the stack: realdml run [--no-fp64] -- CMD ...")
    _device_arguments(r)
    r.add_argument("command", nargs=argparse.REMAINDER, help="the command, after --")
    e = sub.add_parser("env", help="print the stack's environment as export lines")
    _device_arguments(e)
    i = sub.add_parser("info", help="versions, adapter name, float64, cache path")
    _device_arguments(i)
    i.add_argument("--json", action="store_true", help="print JSON")


def _device_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--fp64", action=argparse.BooleanOptionalAction, default=True,
                        help="report float64 support, like a GPU that has it (default); --no-fp64: "
                             "a consumer GPU without float64 (failure_modes.md row #7)")
    parser.add_argument("--verbose", action="store_true", help="leave vkd3d-proton's log on")


def _positive(text: str) -> int:
    value = int(text)
    if value < 1:
        raise argparse.ArgumentTypeError(f"--jobs must be 1 or more, got {value}")
    return value


def main(args: argparse.Namespace) -> int:
    try:
        return COMMANDS[args.realdml_command](args)
    except (SourceError, BuildError, NoBuild) as e:
        print(f"dmlshim realdml: {e}", file=sys.stderr)
        return 2


def _build(args) -> int:
    build_stack(args.sources, args.jobs, log=lambda line: print(line, file=sys.stderr))
    return 0


def _run(args) -> int:
    command = args.command[1:] if args.command[:1] == ["--"] else args.command
    if not command:
        print("dmlshim realdml run: no command; usage: realdml run [--no-fp64] -- CMD ...", file=sys.stderr)
        return 2
    stack = stack_module.current()
    try:
        return stack.run(command, fp64=args.fp64, verbose=args.verbose)
    except FileNotFoundError:
        print(f"dmlshim realdml run: {command[0]!r}: no such program", file=sys.stderr)
        return 127


def _env(args) -> int:
    print(stack_module.export_lines(stack_module.current().environment(args.fp64, args.verbose)))
    return 0


def _info(args) -> int:
    stack = stack_module.current()
    facts = stack.facts()
    data = {"stack": str(stack.path), "cache": str(stack_module.cache_root()), "fp64": args.fp64,
            "versions": facts["versions"], "patches": facts["patches"], "built": facts["built"],
            "adapter": stack_module.probe_device(stack, args.fp64)}
    if args.json:
        print(json.dumps(data, indent=2))
        return 0
    adapter = data["adapter"]
    rows = [("stack", data["stack"]), ("built", f"{data['built']} (cache {data['cache']})"),
            *data["versions"].items(), ("patches", ", ".join(data["patches"]))]
    if "error" in adapter:
        rows.append(("adapter", f"unknown: {adapter['error']}"))
    else:
        rows += [("adapter", f"{adapter['name'].strip()} ({adapter['count']} device)"),
                 ("float64", f"{'yes' if adapter['float64'] else 'no'} (--{'' if args.fp64 else 'no-'}fp64)")]
    for name, value in rows:
        print(f"{name:<17}{value}")
    return 0


COMMANDS = {"build": _build, "run": _run, "env": _env, "info": _info}
