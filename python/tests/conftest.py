"""Test support: real fabkv-server processes (no mocks), started as tests/support/ready_process.h
starts them: --listen 127.0.0.1:0, and the first line of stdout is "READY <host:port>" (then
"MEMCACHED <host:port>" with --memcached).

Environment (python/CMakeLists.txt sets both for the ctest entries):
  FABKV_SERVER_BIN      the fabkv-server to run (default: build/bin/fabkv-server of this checkout)
  FABKV_TEST_PROVIDERS  comma-separated providers the server tests run on (default: shm,tcp)
"""
import os
import pathlib
import queue
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
        # One thread reads every line, so that a full pipe never blocks the server, into a queue
        # that the first lines are awaited from (select() on the pipe would miss a second line
        # already read ahead into the file object's buffer).
        self._lines = queue.Queue()
        threading.Thread(target=self._read, daemon=True).start()
        deadline = time.monotonic() + 20
        line = self._next_line(deadline)
        if not line.startswith("READY "):
            self.kill()
            raise RuntimeError(f"{' '.join(argv)} did not start: {line!r}")
        self.address = line.split()[1]
        # With --memcached, its address follows: "MEMCACHED <host:port>".
        self.memcached = None
        if "--memcached" in extra:
            line = self._next_line(deadline)
            if not line.startswith("MEMCACHED "):
                self.kill()
                raise RuntimeError(f"{' '.join(argv)} printed no MEMCACHED line: {line!r}")
            self.memcached = line.split()[1]

    def _read(self):
        for line in self.proc.stdout:
            self._lines.put(line)
        self._lines.put("")  # end of output

    def _next_line(self, deadline):
        try:
            return self._lines.get(timeout=max(0.0, deadline - time.monotonic()))
        except queue.Empty:
            return ""

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


def process_state(pid):
    """The state letter of every thread of `pid` agreeing, from /proc (R, S, T, ...)."""
    states = set()
    for tid in os.listdir(f"/proc/{pid}/task"):
        with open(f"/proc/{pid}/task/{tid}/stat") as f:
            states.add(f.read().rsplit(")", 1)[1].split()[0])
    return states.pop() if len(states) == 1 else "?"


def stop_process(pid):
    """SIGSTOP, and wait (bounded) until every thread of pid is stopped: SIGSTOP takes effect
    when a thread next enters the kernel, and a busy-polling worker on a loaded host was seen to
    answer one more GET after kill() returned."""
    os.kill(pid, signal.SIGSTOP)
    deadline = time.monotonic() + 10
    while process_state(pid) != "T" and time.monotonic() < deadline:
        time.sleep(0.001)
    assert process_state(pid) == "T"


class Ticker:
    """A thread counting milliseconds while the `with` block runs: its `ticks` show whether
    other Python threads ran meanwhile (the GIL released by a blocking call)."""

    def __enter__(self):
        self.ticks = 0
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._count)
        self._thread.start()
        return self

    def _count(self):
        while not self._stop.is_set():
            self.ticks += 1
            time.sleep(0.001)

    def __exit__(self, *exc):
        self._stop.set()
        self._thread.join(timeout=10)


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
