"""Test support: real fabkv-server processes (no mocks), started as tests/support/ready_process.h
starts them: --listen 127.0.0.1:0, and the first line of stdout is "READY <host:port>".

Environment (python/CMakeLists.txt sets both for the ctest entries):
  FABKV_SERVER_BIN      the fabkv-server to run (default: build/bin/fabkv-server of this checkout)
  FABKV_TEST_PROVIDERS  comma-separated providers the server tests run on (default: shm,tcp)
"""
import os
import pathlib
import selectors
import signal
import subprocess
import threading
import time

import pytest

ROOT = pathlib.Path(__file__).resolve().parents[2]
SERVER_BIN = os.environ.get("FABKV_SERVER_BIN", str(ROOT / "build" / "bin" / "fabkv-server"))
PROVIDERS = [p for p in os.environ.get("FABKV_TEST_PROVIDERS", "shm,tcp").split(",") if p]

# The data-path bound of the tests' clients: generous, as the C++ e2e tests' (two shared cores).
TIMEOUT_MS = 10000

# Key-value protocols that one server serves together: pilaf's server side with every protocol
# that runs on any engine (tests/client/cross_protocol_test.cc, "families").
PILAF_FAMILY = "herd,server-reply,pilaf,pilaf-vo"


class Server:
    """One fabkv-server process; stop() by SIGTERM, kill() by SIGKILL as a crash would."""

    def __init__(self, provider, protocols, *extra):
        self.provider = provider
        self.protocols = protocols
        argv = [SERVER_BIN, "--provider", provider, "--listen", "127.0.0.1:0",
                "--protocols", protocols, "--workers", "2", "--cores", "-1", "--log", "warn",
                *extra]
        self.proc = subprocess.Popen(argv, stdin=subprocess.DEVNULL, stdout=subprocess.PIPE,
                                     text=True)
        line = self._first_line(deadline=time.monotonic() + 20)
        if not line.startswith("READY "):
            self.kill()
            raise RuntimeError(f"{' '.join(argv)} did not start: {line!r}")
        self.address = line.split()[1]
        # Whatever else it prints is read and dropped, so that a full pipe never blocks it.
        threading.Thread(target=self.proc.stdout.read, daemon=True).start()

    def _first_line(self, deadline):
        sel = selectors.DefaultSelector()
        sel.register(self.proc.stdout, selectors.EVENT_READ)
        try:
            while time.monotonic() < deadline:
                if sel.select(timeout=max(0.0, deadline - time.monotonic())):
                    return self.proc.stdout.readline()
            return ""
        finally:
            sel.close()

    def stop(self):
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
            try:
                self.proc.wait(timeout=10)
            except subprocess.TimeoutExpired:
                self.kill()
        return self.proc.returncode

    def kill(self):
        if self.proc.poll() is None:
            self.proc.kill()
            self.proc.wait(timeout=10)
        # A killed server leaves its shared-memory regions, named "<pid>:..." (src/fabric/
        # isolation.cc, remove_regions_of).
        for f in pathlib.Path("/dev/shm").glob(f"{self.proc.pid}:*"):
            f.unlink(missing_ok=True)


@pytest.fixture(params=PROVIDERS)
def provider(request):
    return request.param


@pytest.fixture
def start_server():
    """start_server(provider, protocols, *flags) -> Server, stopped after the test."""
    started = []

    def start(provider, protocols, *extra):
        s = Server(provider, protocols, *extra)
        started.append(s)
        return s

    yield start
    for s in started:
        s.stop()


@pytest.fixture
def pilaf_server(start_server, provider):
    """A server of pilaf, pilaf-vo, herd and server-reply on one engine."""
    return start_server(provider, PILAF_FAMILY)
