"""fabkv.Client against real fabkv-server processes on each provider (conftest.py)."""
import os
import signal
import subprocess
import sys
import threading
import time

import pytest

import fabkv
from conftest import TIMEOUT_MS, Ticker, stop_process

pytestmark = pytest.mark.server


def client(server, protocol, **kw):
    kw.setdefault("timeout_ms", TIMEOUT_MS)
    return fabkv.Client(server.address, protocol=protocol, provider=server.provider, **kw)


def test_two_protocols_on_one_server_see_each_others_writes(pilaf_server):
    with client(pilaf_server, "pilaf") as p, client(pilaf_server, "herd") as h, \
            client(pilaf_server, "server-reply") as r:
        p.put(b"by-pilaf", b"one")
        h.put(b"by-herd", b"two")
        assert h.get(b"by-pilaf") == b"one"
        assert p.get(b"by-herd") == b"two"
        assert r.get(b"by-herd") == b"two"
        big = os.urandom(3000)  # over a slot: sent indirect (docs/client.md, "Large values")
        r.put(b"big", big)
        assert p.get(b"big") == big and h.get(b"big") == big
        assert h.delete(b"by-pilaf") is True
        assert p.get(b"by-pilaf") is None
        assert p.delete(b"by-pilaf") is False


def test_str_keys_and_values_are_utf8(pilaf_server):
    with client(pilaf_server, "pilaf") as c:
        c.put("ключ", "значение ✓")
        assert c.get("ключ") == "значение ✓".encode()
        assert c.get("ключ".encode()) == "значение ✓".encode()
        c.put(bytearray(b"ba"), memoryview(b"mv"))
        assert c.get(b"ba") == b"mv"
        assert c.delete("ключ") is True
        assert c.get("ключ") is None
        with pytest.raises(TypeError):
            c.put(7, b"v")
        with pytest.raises(TypeError):
            c.get(None)


def test_miss_is_none_not_an_error(pilaf_server):
    with client(pilaf_server, "herd") as c:
        assert c.get(b"never-written") is None
        assert c.delete(b"never-written") is False


def test_oversized_value_and_key_raise_too_large(pilaf_server):
    with client(pilaf_server, "herd") as c:
        limit = c.max_value
        assert limit >= 64 * 1024
        c.put(b"at-limit", b"x" * limit)
        assert len(c.get(b"at-limit")) == limit
        with pytest.raises(fabkv.TooLarge) as e:
            c.put(b"over", b"x" * (limit + 1))
        assert e.value.status is fabkv.Status.TOO_LARGE
        assert isinstance(e.value, ValueError) and isinstance(e.value, fabkv.Error)
        assert str(limit) in str(e.value)
        with pytest.raises(fabkv.TooLarge):
            c.get(b"k" * 251)
        with pytest.raises(fabkv.InvalidKey) as e:
            c.put(b"", b"v")
        assert e.value.status == fabkv.Status.INVALID_KEY
        c.put(b"still-serving", b"yes")
        assert c.get(b"still-serving") == b"yes"


def test_a_protocol_the_server_does_not_serve_is_refused(pilaf_server):
    with pytest.raises(fabkv.ServerGone) as e:
        client(pilaf_server, "farm")
    assert e.value.status is fabkv.Status.SERVER_GONE
    assert "farm" in str(e.value)
    with pytest.raises(fabkv.Error) as e:
        client(pilaf_server, "no-such-protocol")
    assert e.value.status is fabkv.Status.ERROR
    assert "pilaf" in str(e.value)  # the message lists the known ones


def test_next_on_a_key_value_protocol_raises(pilaf_server):
    with client(pilaf_server, "herd") as c:
        with pytest.raises(fabkv.Error, match="sequencer") as e:
            c.next()
        assert e.value.status is fabkv.Status.ERROR


def test_dead_server_raises_server_gone_in_bounded_time(start_server, provider):
    s = start_server(provider, "herd")
    c = client(s, "herd", timeout_ms=2000)
    c.put(b"k", b"v")
    s.kill()
    t0 = time.monotonic()
    with pytest.raises((fabkv.ServerGone, fabkv.TimeoutError)) as e:
        for _ in range(100):  # the first calls may still be answered by nobody: each is bounded
            c.get(b"k")
    assert time.monotonic() - t0 < 30
    assert e.value.status in (fabkv.Status.SERVER_GONE, fabkv.Status.TIMEOUT)
    with pytest.raises(fabkv.Error):
        c.put(b"k", b"v")
    c.close()
    with pytest.raises(fabkv.ServerGone):
        client(s, "herd", timeout_ms=2000)


def test_a_hung_server_times_out_and_the_gil_is_released_meanwhile(start_server, provider):
    s = start_server(provider, "herd")
    with client(s, "herd", timeout_ms=1500) as c:
        c.put(b"k", b"v")
        stop_process(s.proc.pid)
        try:
            with Ticker() as ticker:
                t0 = time.monotonic()
                with pytest.raises(fabkv.TimeoutError) as e:
                    c.get(b"k")
                waited = time.monotonic() - t0
        finally:
            os.kill(s.proc.pid, signal.SIGCONT)
        assert e.value.status is fabkv.Status.TIMEOUT
        assert isinstance(e.value, TimeoutError)  # the built-in one too
        assert 1.0 <= waited < 15
        # The other thread ran while get() waited: it would count 0 with the GIL held.
        assert ticker.ticks > 100


def test_context_manager_closes(pilaf_server):
    with client(pilaf_server, "pilaf") as c:
        assert not c.closed
        c.put(b"cm", b"1")
        assert "pilaf" in repr(c)
    assert c.closed
    assert "closed" in repr(c)
    with pytest.raises(ValueError, match="closed"):
        c.get(b"cm")
    c.close()  # a second close does nothing


def test_stats_is_a_dict(pilaf_server):
    with client(pilaf_server, "pilaf") as c:
        c.put(b"s", b"1")
        st = c.stats()
        assert isinstance(st, dict)
        assert isinstance(st["workers"], list) and len(st["workers"]) == 2
        assert "pilaf" in st["workers"][0]["protocols"]
        assert c.layout["protocol"] == "pilaf"
        assert c.provider.startswith(pilaf_server.provider)


def test_one_client_shared_by_threads(pilaf_server):
    with client(pilaf_server, "herd") as c:
        errors = []

        def work(t):
            try:
                for i in range(100):
                    c.put(f"t{t}-{i}", f"v{t}-{i}")
                    assert c.get(f"t{t}-{i}") == f"v{t}-{i}".encode()
            except Exception as e:  # noqa: BLE001 - reported below
                errors.append(e)

        threads = [threading.Thread(target=work, args=(t,)) for t in range(4)]
        for t in threads:
            t.start()
        for t in threads:
            t.join(timeout=120)
        assert not errors
        assert c.get(b"t3-99") == b"v3-99"


def kv_protocols():
    return [p["name"] for p in fabkv.protocol_info() if not p["sequencer"]]


@pytest.mark.parametrize("protocol", kv_protocols())
def test_every_key_value_protocol(start_server, provider, protocol):
    s = start_server(provider, protocol)
    with client(s, protocol) as c:
        for i in range(20):
            c.put(f"{protocol}-{i}", os.urandom(1 + 150 * i))
        c.put(b"same", protocol)
        assert c.get(b"same") == protocol.encode()
        assert c.get(f"{protocol}-19") is not None
        assert c.delete(b"same") is True
        assert c.get(b"same") is None


@pytest.mark.parametrize("protocol", [p["name"] for p in fabkv.protocol_info() if p["sequencer"]])
def test_every_sequencer_counts_up(start_server, provider, protocol, tmp_path):
    # A sequencer keeps its high-water mark in --data-dir (docs/sequencer.md).
    s = start_server(provider, protocol, "--data-dir", str(tmp_path))
    with client(s, protocol) as a, client(s, protocol) as b:
        got = [a.next() for _ in range(50)]
        assert got == sorted(got) and len(set(got)) == 50
        other = {b.next() for _ in range(50)}
        assert not other & set(got)


CLOSE_WHILE_LATE_ANSWERS_ARRIVE = """
import os, signal, sys
import fabkv
from conftest import stop_process
address, provider, pid = sys.argv[1], sys.argv[2], int(sys.argv[3])
c = fabkv.Client(address, provider=provider, timeout_ms=1000)
for i in range(10):
    c.put(f"late-{i}", "v")
stop_process(pid)
try:
    c.get("late-3")
    print("answered")
except fabkv.TimeoutError:
    print("timed out")
os.kill(pid, signal.SIGCONT)
c.close()
print("closed")
"""


def test_closing_while_late_answers_arrive_touches_no_freed_memory(start_server, provider):
    # A GET times out against a stopped server; the server resumes and answers it while the
    # client closes at once. On tcp, ofi_rxm's close hands that late answer to the receive it
    # matches and copies it into the receive's buffer, which the protocol had already freed
    # (a segfault in Client's destructor, before client/session.cc closed the endpoint first).
    # In a child process, so that a crash is this test's failure and not pytest's.
    s = start_server(provider, "herd")
    here = os.path.dirname(os.path.abspath(__file__))
    path = [os.path.dirname(os.path.dirname(os.path.abspath(fabkv.__file__))), here,
            os.environ.get("PYTHONPATH", "")]
    for _ in range(3):
        run = subprocess.run(
            [sys.executable, "-c", CLOSE_WHILE_LATE_ANSWERS_ARRIVE, s.address, provider,
             str(s.proc.pid)],
            capture_output=True, text=True, timeout=60,
            env={**os.environ, "PYTHONPATH": os.pathsep.join(path)})
        assert run.returncode == 0, f"exit {run.returncode}: {run.stdout}{run.stderr}"
        assert run.stdout.split() == ["timed", "out", "closed"]
