"""pytest fixtures for your own tests: a real fabkv-server per test.

Installed with the package (the `pytest11` entry point of python/pyproject.toml), so pytest
loads it by itself; from a source tree, `pytest -p fabkv.pytest_plugin`.

    def test_cache(fabkv_server):                  # "127.0.0.1:PORT", a server just for this test
        with fabkv.Client(fabkv_server.address, provider=fabkv_server.provider) as c:
            ...

    def test_two(fabkv_server_factory):
        a = fabkv_server_factory(provider="tcp", args=["--protocols", "pilaf"])

The server binary is $FABKV_SERVER_BIN, else `fabkv-server` on PATH; the provider is
`--fabkv-provider` (default $FABKV_PROVIDER, else shm). Each server listens on a free port of
127.0.0.1 (--listen 127.0.0.1:0: it prints the one it got), its start is awaited at most
`--fabkv-start-timeout` seconds (default 20), and it is stopped at the end of the test
(SIGTERM, then SIGKILL after 10 s).
"""
from __future__ import annotations

import os
import pathlib
import queue
import shutil
import signal
import subprocess
import threading
from typing import IO, Callable, Iterator, List, Optional, Sequence

import pytest


class FabkvServer:
    """One fabkv-server process: .address (its control HOST:PORT), .provider, .process."""

    def __init__(self, binary: str, provider: str, args: Sequence[str], timeout: float) -> None:
        self.provider = provider
        self.argv = [binary, "--provider", provider, "--listen", "127.0.0.1:0", *args]
        self.process = subprocess.Popen(self.argv, stdin=subprocess.DEVNULL,
                                        stdout=subprocess.PIPE, text=True)
        # Every line read by one thread (a full pipe must never block the server); the first
        # one, "READY <host:port>", awaited from the queue with a deadline.
        self._lines: "queue.Queue[str]" = queue.Queue()
        assert self.process.stdout is not None
        threading.Thread(target=self._read, args=(self.process.stdout,), daemon=True).start()
        try:
            line = self._lines.get(timeout=timeout)
        except queue.Empty:
            line = f"nothing within {timeout} s"
        if not line.startswith("READY "):
            self.stop()
            raise RuntimeError(f"fabkv: {' '.join(self.argv)} did not start: {line.strip()!r}")
        self.address: str = line.split()[1]

    def _read(self, out: IO[str]) -> None:
        for line in out:
            self._lines.put(line)
        self._lines.put("")

    @property
    def pid(self) -> int:
        return self.process.pid

    def stop(self) -> Optional[int]:
        """SIGTERM, and SIGKILL when it has not ended after 10 s; its exit status."""
        if self.process.poll() is None:
            self.process.send_signal(signal.SIGTERM)
            try:
                self.process.wait(timeout=10)
            except subprocess.TimeoutExpired:
                self.process.kill()
                self.process.wait(timeout=10)
        # A killed server leaves its shared-memory regions, named "<pid>:..."
        # (src/fabric/isolation.cc, remove_regions_of).
        for f in pathlib.Path("/dev/shm").glob(f"{self.process.pid}:*"):
            f.unlink(missing_ok=True)
        return self.process.returncode

    def __repr__(self) -> str:
        return f"<FabkvServer {self.provider} at {getattr(self, 'address', '?')}>"


def server_binary() -> str:
    """$FABKV_SERVER_BIN, else fabkv-server on PATH."""
    binary = os.environ.get("FABKV_SERVER_BIN") or shutil.which("fabkv-server")
    if not binary:
        raise RuntimeError("fabkv: no fabkv-server: set FABKV_SERVER_BIN or put it on PATH")
    return binary


def pytest_addoption(parser: pytest.Parser) -> None:
    group = parser.getgroup("fabkv")
    group.addoption("--fabkv-provider", default=os.environ.get("FABKV_PROVIDER", "shm"),
                    help="provider of the fabkv_server fixture's server (shm, tcp, verbs)")
    group.addoption("--fabkv-start-timeout", type=float, default=20.0,
                    help="seconds a fabkv-server may take to start")


ServerFactory = Callable[..., FabkvServer]


@pytest.fixture
def fabkv_server_factory(request: pytest.FixtureRequest) -> Iterator[ServerFactory]:
    """start(provider=None, args=()) -> FabkvServer; every server stopped after the test."""
    started: List[FabkvServer] = []
    config = request.config

    def start(provider: Optional[str] = None, args: Sequence[str] = ()) -> FabkvServer:
        s = FabkvServer(server_binary(), provider or config.getoption("fabkv_provider"),
                        list(args), config.getoption("fabkv_start_timeout"))
        started.append(s)
        return s

    yield start
    for s in started:
        s.stop()


@pytest.fixture
def fabkv_server(fabkv_server_factory: ServerFactory) -> FabkvServer:
    """A fabkv-server for this test (--fabkv-provider, its default protocols)."""
    return fabkv_server_factory()


__all__ = ["FabkvServer", "ServerFactory", "server_binary"]
