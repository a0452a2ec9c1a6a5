"""A test run leaves nothing in the temp directory (issue 26): conftest.py gives each run a
private temp directory and fails the run when a test leaves anything in it."""
import os
import subprocess
import sys
import tempfile
from pathlib import Path

TESTS = Path(__file__).resolve().parent

LEAKY = '''
import tempfile

def test_writes_to_the_temp_directory():
    with open(tempfile.mkstemp(prefix="leaky-", suffix=".log")[1], "w") as f:
        f.write("left behind")
'''


def test_the_run_has_a_private_temp_directory_and_tmp_path_lies_outside_it(tmp_path):
    private = Path(tempfile.gettempdir())
    assert private.name.startswith("dmlshim-test-run-") and os.environ["TMPDIR"] == str(private)
    assert not tmp_path.resolve().is_relative_to(private.resolve())     # pytest's retention works


def test_a_run_that_leaves_a_file_in_the_temp_directory_fails_and_names_it(tmp_path):
    (tmp_path / "test_leaky.py").write_text(LEAKY, encoding="utf-8")
    env = dict(os.environ, PYTHONPATH=os.pathsep.join(filter(None, [str(TESTS), os.environ.get("PYTHONPATH")])))
    run = subprocess.run([sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", "-p", "conftest",
                          "test_leaky.py"], cwd=tmp_path, env=env, capture_output=True, text=True, timeout=600)
    assert run.returncode == 1, run.stdout + run.stderr
    assert "1 passed" in run.stdout and "files left in the temp directory" in run.stdout, run.stdout
    assert any(line.strip().startswith("leaky-") and line.strip().endswith(".log")
               for line in run.stdout.splitlines()), run.stdout
    assert not list(Path(tempfile.gettempdir()).glob("dmlshim-test-run-*")), "the child's folder stays"
