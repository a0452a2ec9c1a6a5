"""FunASR's own OpenAI-compatible server (``funasr-server``) on the emulated DirectML device.

Starts ``funasr-server`` twice on loopback, as a user would, and compares them
through the official ``openai`` client:

* ``python -m dmlshim run --device emulated funasr-server --device privateuseone:0 ...``
  (dmlshim active before funasr's first import, no code edited), and
* ``funasr-server --device cpu ...``, the reference.

Each server binds 127.0.0.1 on a free port and is stopped by its own PID. The model
is a random-weight directory (examples/funasr_models.py) unless ``--model-path``
names yours; exit status 1 if a transcript differs. Needs the ``server`` and
``server-client`` extras (fastapi, uvicorn, python-multipart; openai, psutil).

The helpers (:class:`Server`, :func:`bad_uploads`, :func:`transcribe`) are shared
with tests/test_funasr_server.py and benchmarks/server_load.py.
"""
import argparse
import contextlib
import io
import os
import signal
import socket
import subprocess
import sys
import tempfile
import time
import urllib.request
from pathlib import Path

DATA = Path(__file__).resolve().parent / "data"
HOST = "127.0.0.1"                      # loopback only: funasr-server has no authentication


def free_port():
    """A TCP port free on 127.0.0.1 now (the OS picks it)."""
    with socket.socket() as s:
        s.bind((HOST, 0))
        return s.getsockname()[1]


class Server:
    """One ``funasr-server`` process on 127.0.0.1.

    ``device``: ``"emulated"`` (under ``dmlshim run --device emulated``, model on
    ``privateuseone:0``) or ``"cpu"`` (plain ``funasr-server --device cpu``).
    Use as a context manager: it starts, waits for ``/health`` (up to
    ``timeout`` seconds; ``RuntimeError`` with the log tail if it does not come
    up), and stops by PID on exit. Output goes to a log file in the folder
    ``log_dir``, ``self.log``, which the caller owns (a test's ``tmp_path``).
    """

    def __init__(self, device, model_path, *, log_dir, timeout=180, report=False, model=None):
        if device not in ("emulated", "cpu"):
            raise ValueError(f"device={device!r}: allowed values are 'emulated', 'cpu'")
        self.device, self.model_path, self.timeout = device, str(model_path), timeout
        self.model = model                  # funasr-server --model (e.g. fun-asr-nano)
        self.port = free_port()
        self.url = f"http://{HOST}:{self.port}/v1"
        self.report = report
        self.proc = None
        self.log = Path(log_dir) / f"funasr-server-{device}-{self.port}.log"

    def command(self):
        from dmlshim import run

        program = run.find_program("funasr-server")
        if program is None:
            raise RuntimeError("funasr-server not found: pip install funasr (and the 'server' extra)")
        args = ["--model-path", self.model_path, "--host", HOST, "--port", str(self.port)]
        if self.model:
            args = ["--model", self.model, *args]
        if self.device == "cpu":
            return [program, "--device", "cpu", *args]
        shim = ["--device", "emulated"] + (["--report"] if self.report else [])
        return [sys.executable, "-m", "dmlshim", "run", *shim, "funasr-server",
                "--device", "privateuseone:0", *args]

    def __enter__(self):
        return self.start()

    def __exit__(self, *exc):
        self.stop()

    def start(self):
        # this repo's CI: torchvision stand-ins in the server too (transformers imports
        # torchvision for Fun-ASR-Nano's Qwen3); a no-op where torchvision loads
        site = str(DATA.parent / "_torchvision_site")
        path = os.pathsep.join(p for p in (site, os.environ.get("PYTHONPATH")) if p)
        env = dict(os.environ, PYTHONUNBUFFERED="1", TQDM_DISABLE="1", PYTHONPATH=path)
        with open(self.log, "wb") as log:
            self.proc = subprocess.Popen(self.command(), stdout=log, stderr=subprocess.STDOUT,
                                         stdin=subprocess.DEVNULL, env=env)
        deadline = time.monotonic() + self.timeout
        while time.monotonic() < deadline:
            if self.proc.poll() is not None:
                raise RuntimeError(f"funasr-server ({self.device}) exited with {self.proc.returncode}:\n"
                                   f"{self.log_tail()}")
            with contextlib.suppress(OSError):
                with urllib.request.urlopen(f"http://{HOST}:{self.port}/health", timeout=2) as r:
                    if r.status == 200:
                        return self
            time.sleep(0.3)
        self.stop()
        raise RuntimeError(f"funasr-server ({self.device}) not up after {self.timeout} s:\n{self.log_tail()}")

    def stop(self):
        """Ctrl+C (SIGINT) to this server's PID, then SIGKILL after 20 s."""
        if self.proc is None or self.proc.poll() is not None:
            return
        sig = signal.SIGINT if os.name == "posix" else signal.CTRL_C_EVENT
        with contextlib.suppress(ProcessLookupError):
            os.kill(self.proc.pid, sig)
        try:
            self.proc.wait(timeout=20)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait()

    def health(self):
        """The server's ``GET /health`` JSON (status, device, models_loaded)."""
        import json

        with urllib.request.urlopen(f"http://{HOST}:{self.port}/health", timeout=10) as r:
            return json.loads(r.read())

    def rss(self):
        """Resident memory of the server process, bytes."""
        import psutil

        return psutil.Process(self.proc.pid).memory_info().rss

    def log_tail(self, chars=3000):
        return self.log.read_text(encoding="utf-8", errors="replace")[-chars:]

    def client(self, **kwargs):
        """An ``openai.OpenAI`` client for this server (the key is a placeholder)."""
        from openai import OpenAI

        return OpenAI(base_url=self.url, api_key="not-needed", **{"timeout": 120, **kwargs})


def transcribe(client, data, name="audio.wav"):
    """Text of one ``audio.transcriptions.create`` call (model "custom" = --model-path)."""
    return client.audio.transcriptions.create(model="custom", file=(name, data)).text


def wav_bytes(samples, rate):
    """16-bit PCM WAV file contents of float ``samples`` at ``rate`` Hz."""
    import soundfile as sf

    buf = io.BytesIO()
    sf.write(buf, samples, rate, format="WAV", subtype="PCM_16")
    return buf.getvalue()


def samples():
    """``{name: WAV bytes}``: the bundled Mandarin and English speech."""
    return {p.name: p.read_bytes() for p in (DATA / "zh.wav", DATA / "en.wav")}


def bad_uploads(silence_s=60):
    """``{name: bytes}`` a server meets: undecodable ones (empty, a WAV cut inside its
    header, bytes that are not audio) and decodable but unusual ones (8 kHz instead
    of 16 kHz, ``silence_s`` seconds of silence)."""
    import numpy as np
    import soundfile as sf

    good = (DATA / "zh.wav").read_bytes()
    speech, rate = sf.read(DATA / "zh.wav", dtype="float32")
    return {"empty.wav": b"", "truncated-header.wav": good[:30],
            "not-audio.wav": b"this is not audio, just text " * 40,
            "8khz.wav": wav_bytes(speech[::2], rate // 2),
            "silence.wav": wav_bytes(np.zeros(int(rate * silence_s), dtype=np.float32), rate)}


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--model-path", help="a FunASR model directory (default: random weights)")
    args = parser.parse_args(argv)
    sys.path.insert(0, str(Path(__file__).resolve().parent))
    import funasr_models

    model_path = args.model_path or funasr_models.build("seaco")
    texts = {}
    with tempfile.TemporaryDirectory(prefix="funasr-server-logs-") as logs:
        for device in ("emulated", "cpu"):
            with Server(device, model_path, log_dir=logs, report=device == "emulated") as server:
                client = server.client()
                texts[device] = {name: transcribe(client, data, name) for name, data in samples().items()}
                print(f"{device}: {server.url} (pid {server.proc.pid})")
                for name, text in texts[device].items():
                    print(f"  {name}: {text[:60]}")
    same = texts["emulated"] == texts["cpu"]
    print("identical: the emulated DirectML server's transcripts equal the CPU server's" if same
          else "DIFFERENT transcripts")
    return 0 if same else 1


if __name__ == "__main__":
    sys.exit(main())
