"""Starts `oxinfer serve` processes on loopback for the tests (OXINFER_BIN, OXINFER_TEST_MODEL)."""

import os
import re
import subprocess
import threading
import time

import pytest

BIN = os.environ.get("OXINFER_BIN", "target/release/oxinfer")
MODEL = os.environ.get(
    "OXINFER_TEST_MODEL",
    os.path.expanduser("~/.cache/oxinfer/models/SmolLM2-135M-Instruct.Q4_1.gguf"),
)


class Server:
    """One `oxinfer serve` child process; `url` is its base URL."""

    def __init__(self, *args, model=MODEL):
        self.proc = subprocess.Popen(
            [BIN, "serve", "-m", model, "--port", "0", "-t", "2", *args],
            stderr=subprocess.PIPE,
            stdout=subprocess.DEVNULL,
            text=True,
        )
        self.log = []
        deadline = time.time() + 60
        self.url = None
        while time.time() < deadline:
            line = self.proc.stderr.readline()
            if not line:
                break
            self.log.append(line)
            m = re.search(r"listening on (http://\S+)", line)
            if m:
                self.url = m.group(1)
                break
        if self.url is None:
            self.proc.kill()
            raise RuntimeError("server did not start:\n" + "".join(self.log))
        # Keep draining stderr so the child never blocks on a full pipe.
        threading.Thread(target=self._drain, daemon=True).start()

    def _drain(self):
        for line in self.proc.stderr:
            self.log.append(line)

    def stop(self):
        self.proc.terminate()
        try:
            self.proc.wait(timeout=10)
        except subprocess.TimeoutExpired:
            self.proc.kill()


@pytest.fixture(scope="session")
def server():
    """8 slots, the default context (4096)."""
    s = Server("--parallel", "8")
    yield s
    s.stop()


@pytest.fixture(scope="session")
def small_server():
    """One slot, a queue of one, a 256-token context, a 64 KiB body limit and an API key."""
    s = Server(
        "--parallel", "1", "--queue", "1", "--ctx", "256",
        "--max-body", "65536", "--api-key", "test-key",
    )
    yield s
    s.stop()
