"""``python -m dmlshim run``: run a program you do not edit with dmlshim active.

::

    python -m dmlshim run [--device emulated] [--trace] [--fallback MODE] [--report] TARGET [ARGS...]

TARGET is a script path, ``-m MODULE``, or the name of an installed program such
as a console script (``funasr-server``, ``funasr``); it is looked up next to this
Python first (its environment's ``bin``/``Scripts``), then on ``PATH``.

How (as ``ddtrace-run`` and ``opentelemetry-instrument`` do it): the folder
``dmlshim/_sitecustomize`` goes first on ``PYTHONPATH``, so every Python process
of the run, children included, imports its ``sitecustomize`` at start-up and
calls ``dmlshim.activate()`` (:mod:`dmlshim.bootstrap`) before the program's
first import.  Options travel in the environment.  On POSIX the target then
*replaces* this process (``os.execve``): same PID, so exit status, signals,
stdin and stdout are the target's own.  On Windows, where ``exec`` does not
replace a process, the target runs as a child and its exit status is returned.
"""
from __future__ import annotations

import argparse
import importlib.util
import os
import shutil
import subprocess
import sys
from typing import Dict, List, Mapping, Optional

from . import bootstrap, config

BOOTSTRAP_DIR = os.path.join(os.path.dirname(os.path.abspath(__file__)), "_sitecustomize")
DEVICES = ("emulated",) + config.DEVICE_KINDS


class UsageError(ValueError):
    """A bad ``dmlshim run`` argument; the message says what is allowed."""


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--device", metavar="DEVICE",
                        help="'emulated': the emulated DirectML device in each process, for machines "
                             "without a GPU; else a DMLSHIM_DEVICE value (auto, directml, cuda, cpu...)")
    parser.add_argument("--trace", action="store_true",
                        help="one log line per intercepted call (DMLSHIM_TRACE=1)")
    parser.add_argument("--trace-file", metavar="FILE",
                        help="write the trace to FILE as JSON Lines (DMLSHIM_TRACE=FILE)")
    parser.add_argument("--fallback", metavar="MODE",
                        help=f"{', '.join(config.FALLBACK_MODES)} (DMLSHIM_FALLBACK; default auto)")
    parser.add_argument("--report", action="store_true",
                        help="print dmlshim.report() on stderr when each shimmed process exits")
    # REMAINDER: everything after -m MODULE / TARGET belongs to the target, options included
    parser.add_argument("-m", dest="module", nargs=argparse.REMAINDER, metavar="MODULE",
                        help="run a library module as a script, as python -m does")
    parser.add_argument("target", nargs=argparse.REMAINDER, metavar="TARGET [ARGS...]",
                        help="a script path or an installed program (console script), and its arguments")


def main(args: argparse.Namespace) -> int:
    """The ``run`` subcommand.  Returns the target's exit status (Windows), or never
    returns (POSIX: the target replaces this process).  A bad argument: status 2 and
    a message on stderr."""
    try:
        argv = command(args)
        env = environment(args)
    except UsageError as exc:
        sys.stderr.write(f"python -m dmlshim run: error: {exc}\n")
        return 2
    return execute(argv, env)


def command(args: argparse.Namespace, *, executable: str = sys.executable) -> List[str]:
    """The command line that runs the target: ``[program, *arguments]``.

    Raises:
        UsageError: no target, ``-m`` without a module or with an unknown one, or a
            TARGET that is neither an existing path nor a program found next to
            ``executable`` or on ``PATH``.
    """
    if args.module is not None:
        if not args.module:
            raise UsageError("-m needs a module name, e.g. -m funasr.bin.server")
        module = args.module[0]
        if importlib.util.find_spec(module.partition(".")[0]) is None:   # top level: imports nothing
            raise UsageError(f"-m {module}: no module named {module.partition('.')[0]!r} in {executable}")
        return [executable, "-m", *args.module]
    if not args.target:
        raise UsageError("no TARGET: give a script path, -m MODULE or an installed program "
                         "(e.g. funasr-server), then its arguments")
    target, rest = args.target[0], args.target[1:]
    if os.path.exists(target):
        if os.path.isfile(target) and os.access(target, os.X_OK) and not target.endswith((".py", ".pyw")):
            return [os.path.abspath(target), *rest]          # a console script or program: its own #!
        return [executable, target, *rest]
    program = find_program(target, executable)
    if program is None:
        here = os.path.dirname(executable)
        raise UsageError(f"{target!r} is not a file, and no program of that name is in {here} or on PATH; "
                         "give a script path, -m MODULE or an installed program")
    return [program, *rest]


def find_program(name: str, executable: str = sys.executable) -> Optional[str]:
    """Path of program ``name``: next to ``executable`` first (the console scripts of
    its environment, even when that is not on ``PATH``), then on ``PATH``; else None."""
    if os.sep in name or (os.altsep and os.altsep in name):
        return None
    return shutil.which(name, path=os.path.dirname(executable)) or shutil.which(name)


def environment(args: argparse.Namespace, environ: Mapping[str, str] = os.environ) -> Dict[str, str]:
    """The target's environment: ``environ`` plus the bootstrap on ``PYTHONPATH`` and
    the options as ``DMLSHIM_*`` variables (options win over ``environ``).

    Raises:
        UsageError: a bad ``--device``, ``--fallback`` or ``--trace-file`` value, or
            ``--trace`` with ``--trace-file``.
    """
    env = dict(environ)
    paths = [p for p in env.get("PYTHONPATH", "").split(os.pathsep) if p and p != BOOTSTRAP_DIR]
    env["PYTHONPATH"] = os.pathsep.join([BOOTSTRAP_DIR, *paths])
    try:
        if args.fallback is not None:
            env["DMLSHIM_FALLBACK"] = config.parse_fallback(args.fallback, name="--fallback")
        if args.trace and args.trace_file:
            raise UsageError("--trace and --trace-file: give one (--trace logs, --trace-file writes JSON Lines)")
        if args.trace:
            env["DMLSHIM_TRACE"] = "1"
        elif args.trace_file:
            env["DMLSHIM_TRACE"] = os.path.abspath(config.parse_trace(args.trace_file, name="--trace-file"))
        env.pop(bootstrap.RUN_DEVICE, None)
        if args.device == "emulated":
            env[bootstrap.RUN_DEVICE] = "emulated"
            env["DMLSHIM_DEVICE"] = "directml"       # select_device() returns the emulated device
        elif args.device is not None:
            env["DMLSHIM_DEVICE"] = config.parse_device(args.device, name="--device")
    except ValueError as exc:
        if isinstance(exc, UsageError):
            raise
        raise UsageError(f"{exc}" + (" or 'emulated'" if "--device" in str(exc) else "")) from None
    env[bootstrap.RUN_REPORT] = "1" if args.report else "0"
    env[bootstrap.RUN_PID] = str(os.getpid())
    return env


def execute(argv: List[str], env: Dict[str, str]) -> int:
    """Run ``argv`` with ``env``: replace this process on POSIX (never returns), else
    run it as a child and return its exit status."""
    sys.stdout.flush()
    sys.stderr.flush()
    if os.name == "posix":
        try:
            os.execve(argv[0], argv, env)
        except OSError as exc:      # e.g. not executable, a bad #! line
            sys.stderr.write(f"python -m dmlshim run: cannot run {argv[0]}: {exc}\n")
            return 126 if isinstance(exc, PermissionError) else 127
    try:
        return subprocess.call(argv, env=env)
    except KeyboardInterrupt:       # Ctrl+C reached the child too; report what it made of it
        return 130
