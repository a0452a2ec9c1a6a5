"""``python -m dmlshim run``: zero-code activation through a sitecustomize bootstrap.

The end-to-end tests start real processes, as a user would, on the emulated device:
activation before the program's first import (``from torch import cat`` and basicsr,
the two import-order limitations of ``activate()``), inheritance by a child Python,
a user's own ``sitecustomize`` still loaded, exit status, stdin/stdout, signals.
"""
import argparse
import os
import re
import signal
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import pytest

from dmlshim import __main__ as cli
from dmlshim import bootstrap, run

ROOT = Path(__file__).resolve().parents[1]

APP = textwrap.dedent('''
    from torch import cat               # taken before anything else: activate() already ran
    import os, subprocess, sys
    sys.path.insert(0, os.environ["EXAMPLES"])
    import torchvision_ops; torchvision_ops.apply()   # only for this machine's CUDA torchvision
    import basicsr                      # fails in its own import unless the basicsr patch is in
    import torch, dmlshim
    dev = torch.device("privateuseone:0")
    y = cat([torch.arange(6.0, device=dev).reshape(2, 3), torch.ones(0, 3, device=dev)])
    print("parent", dmlshim.is_active(), dmlshim.settings().fallback, os.environ.get("FROM_USER_SITE"),
          y.device, y.cpu().tolist(), sys.stdin.read().strip())
    child = subprocess.run([sys.executable, "-c", "import dmlshim, torch; d = 'privateuseone:0'; "
                            "print('child', dmlshim.is_active(), "
                            "torch.cat([torch.ones(1, device=d), torch.ones(0, device=d)]).device)"],
                           capture_output=True, text=True, check=True)
    print(child.stdout.strip())
    sys.exit(3)
''')


def _run(args, **kwargs):
    env = dict(os.environ, EXAMPLES=str(ROOT / "examples"), **kwargs.pop("env", {}))
    return subprocess.run([sys.executable, "-m", "dmlshim", "run", *args], capture_output=True,
                          text=True, env=env, timeout=120, **kwargs)


def test_script_and_child_run_shimmed_on_the_emulated_device(tmp_path):
    app = tmp_path / "app.py"
    app.write_text(APP)
    user_site = tmp_path / "user_site"          # a sitecustomize of the user's: still loaded
    user_site.mkdir()
    (user_site / "sitecustomize.py").write_text("import os; os.environ['FROM_USER_SITE'] = 'yes'\n")
    res = _run(["--device", "emulated", "--fallback", "known", "--report", str(app)],
               input="hello from stdin\n", env={"PYTHONPATH": str(user_site)})
    assert res.returncode == 3, res.stderr
    lines = res.stdout.splitlines()
    assert lines == ["parent True known yes privateuseone:0 [[0.0, 1.0, 2.0], [3.0, 4.0, 5.0]] "
                     "hello from stdin", "child True privateuseone:0"]
    report = res.stderr[res.stderr.index("dmlshim report"):]
    assert re.search(r"aten::cat +1 +coerce=1", report)


@pytest.mark.skipif(os.name != "posix", reason="exec keeps the PID on POSIX only")
def test_target_replaces_the_process_and_gets_its_signals(tmp_path):
    app = tmp_path / "sleeper.py"
    app.write_text("import os, sys, time\nprint(os.getpid(), flush=True)\ntime.sleep(60)\n")
    proc = subprocess.Popen([sys.executable, "-m", "dmlshim", "run", str(app)],
                            stdout=subprocess.PIPE, text=True)
    try:
        pid = int(proc.stdout.readline())
        assert pid == proc.pid                  # the target is the process we started
        os.kill(proc.pid, signal.SIGTERM)
        assert proc.wait(timeout=30) == -signal.SIGTERM
    finally:
        if proc.poll() is None:
            os.kill(proc.pid, signal.SIGKILL)
            proc.wait()


@pytest.mark.parametrize("argv, message", [
    ([], "no TARGET"),
    (["-m"], "-m needs a module name"),
    (["-m", "no_such_module_xyz.sub"], "no module named 'no_such_module_xyz'"),
    (["no-such-program-xyz"], "'no-such-program-xyz' is not a file"),
    (["--fallback", "sometimes", "x.py"], "--fallback='sometimes': allowed values are auto, known, off"),
    (["--device", "gpu", "x.py"], "--device='gpu': allowed values are auto"),
    (["--trace", "--trace-file", "t.jsonl", "x.py"], "--trace and --trace-file"),
])
def test_bad_arguments_are_clear_errors(argv, message, capsys):
    if argv and argv[-1] == "x.py":
        argv = argv[:-1] + [__file__]
    assert cli.main(["run", *argv]) == 2
    err = capsys.readouterr().err
    assert err.startswith("python -m dmlshim run: error: ") and message in err


def _args(*argv):
    parser = argparse.ArgumentParser()
    run.add_arguments(parser)
    return parser.parse_args(list(argv))


def test_targets_resolve_to_the_command_python_would_run(tmp_path):
    exe = sys.executable
    assert run.command(_args("-m", "json.tool", "--indent", "2"), executable=exe) == \
        [exe, "-m", "json.tool", "--indent", "2"]
    assert run.command(_args(__file__, "-v", "--x"), executable=exe) == [exe, __file__, "-v", "--x"]
    program = tmp_path / "bin" / "my-tool"      # a console script beside the Python, not on PATH
    program.parent.mkdir()
    program.write_text("#!/bin/sh\n")
    program.chmod(0o755)
    fake_python = str(program.parent / "python")
    assert run.command(_args("--report", "my-tool", "--port", "1"), executable=fake_python) == \
        [str(program), "--port", "1"]
    assert run.command(_args(str(program)), executable=exe) == [str(program)]


def test_environment_puts_the_bootstrap_first_once_and_options_in_variables(tmp_path):
    env = run.environment(_args("--device", "emulated", "--trace-file", str(tmp_path / "t.jsonl"),
                                "--fallback", "OFF", "x.py"),
                          {"PYTHONPATH": os.pathsep.join([run.BOOTSTRAP_DIR, "/mine"]), "DMLSHIM_TRACE": "1"})
    assert env["PYTHONPATH"] == os.pathsep.join([run.BOOTSTRAP_DIR, "/mine"])
    assert env["DMLSHIM_TRACE"] == str(tmp_path / "t.jsonl")
    assert (env["DMLSHIM_FALLBACK"], env["DMLSHIM_DEVICE"], env[bootstrap.RUN_DEVICE]) == \
        ("off", "directml", "emulated")
    env = run.environment(_args("--device", "cpu", "x.py"), {"DMLSHIM_FALLBACK": "known"})
    assert env["PYTHONPATH"] == run.BOOTSTRAP_DIR and env["DMLSHIM_DEVICE"] == "cpu"
    assert env["DMLSHIM_FALLBACK"] == "known" and bootstrap.RUN_DEVICE not in env
