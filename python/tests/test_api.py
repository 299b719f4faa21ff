"""The calls pymemcache and redis-py users expect, on fabkv.Client and fabkv.Cluster, against real
fabkv-server processes on each provider (conftest.py): get_many, set_many, delete_many, gets and
cas, expire= beside expire_at."""
import time

import pytest

import fabkv
from conftest import TIMEOUT_MS, stop_process

pytestmark = pytest.mark.server


def client(server, **kw):
    kw.setdefault("timeout_ms", TIMEOUT_MS)
    return fabkv.Client(server.address, provider=server.provider, **kw)


@pytest.fixture
def herd_server(start_server, provider):
    return start_server(provider, "herd")


def test_set_many_get_many_delete_many(herd_server):
    with client(herd_server) as c:
        items = {f"key-{i}": f"value-{i}".encode() for i in range(300)}
        items[b"bytes-key"] = b"b"
        assert c.set_many(items) == []
        keys = list(items) + ["missing-1", b"missing-2"]
        got = c.get_many(keys)
        assert got == items  # found keys only, keyed as given (str stays str)
        assert c.get_many([bytearray(b"bytes-key")]) == {b"bytes-key": b"b"}
        assert c.get_many([]) == {}
        assert c.delete_many(["key-0", "key-1", "missing-1"]) == 2
        assert c.get("key-0") is None and c.get("key-2") == b"value-2"
        # The same names on a Cluster (get_multi and put_multi stay).
    with fabkv.Cluster([herd_server.address], provider=herd_server.provider,
                       timeout_ms=TIMEOUT_MS) as cl:
        assert cl.set_many({"c1": b"1", "c2": b"2"}, expire=60) == []
        assert cl.get_many(["c1", "c2", "c3"]) == {"c1": b"1", "c2": b"2"}
        assert cl.get_multi(["c1"]) == {"c1": b"1"}
        assert cl.delete_many(["c1", b"c2", "c3"]) == 2
        assert cl.get_many(["c1", "c2"]) == {}
        assert cl.delete_multi([]) == 0


def test_many_refuses_what_can_never_be_stored(herd_server):
    with client(herd_server) as c:
        with pytest.raises(fabkv.InvalidKey):
            c.get_many(["ok", ""])
        with pytest.raises(fabkv.TooLarge):
            c.set_many({"ok": b"v", "big": b"x" * (c.max_value + 1)})
        with pytest.raises(TypeError):
            c.set_many([("k", b"v")])
        assert c.get("ok") == b"v"  # the rest of the window was still sent


def posted(c):
    return sum(v["posted"] for v in c.verb_counters().values())


def test_get_many_is_one_window_not_a_round_trip_each(herd_server):
    """Against a stopped server every request of the window is sent before any answer, and all
    wait for the same deadline: the call ends after about one timeout having posted every
    request, where a loop of round trips would post one and fail (or take a timeout each)."""
    timeout = 1.0
    with client(herd_server, timeout_ms=int(timeout * 1000)) as c:
        n = min(4, c.layout.get("window", 1))  # no more than one worker's window: no wait for a slot
        assert n >= 3, c.layout
        keys = [f"w{i}" for i in range(n)]
        c.set_many({k: b"v" for k in keys})
        stop_process(herd_server.proc.pid)
        before = posted(c)
        t0 = time.monotonic()
        with pytest.raises(fabkv.TimeoutError):
            c.get_many(keys)
        waited = time.monotonic() - t0
        sent = posted(c) - before
        herd_server.kill()  # not resumed: its late answers are not what this test is about
    assert sent >= n, sent
    assert timeout * 0.9 <= waited < timeout * (n - 0.5), (waited, n)


def test_gets_and_cas(herd_server):
    with client(herd_server) as c:
        assert c.gets("nothing") == (None, None)
        assert c.cas("nothing", b"v", 7) is None  # no such key
        c.set("k", b"one")
        value, version = c.gets("k")
        assert value == b"one" and isinstance(version, int) and version > 0
        assert c.cas("k", b"two", version) is True
        assert c.get("k") == b"two"
        assert c.cas("k", b"three", version) is False  # it has another version now
        assert c.get("k") == b"two"
        value2, version2 = c.gets("k")
        assert version2 != version and c.cas("k", b"three", version2) is True
        with pytest.raises(ValueError):
            c.cas("k", b"v", 0)
    with fabkv.Cluster([herd_server.address], provider=herd_server.provider,
                       timeout_ms=TIMEOUT_MS) as cl:
        _, version = cl.gets("k")
        assert cl.cas("k", b"four", version) is True
        assert cl.cas("k", b"five", version) is False
        assert cl.cas("never", b"v", version) is None


def test_expire_is_relative_expire_at_absolute(herd_server):
    with client(herd_server) as c:
        # Whole seconds: 3 leaves at least 2 for the first look.
        c.set("short", b"v", expire=3)
        c.put("at", b"v", expire_at=int(time.time()) + 3)
        c.set_many({"many": b"v"}, expire=3)
        c.set("long", b"v", expire=3600)
        c.set("never", b"v", expire=0)
        assert c.get_many(["short", "at", "many"]) == {"short": b"v", "at": b"v", "many": b"v"}
        deadline = time.monotonic() + 10
        while c.get_many(["short", "at", "many"]) and time.monotonic() < deadline:
            time.sleep(0.2)
        assert c.get_many(["short", "at", "many"]) == {}
        assert c.get("long") == b"v" and c.get("never") == b"v"


BAD_EXPIRY = [
    ({"expire": 5, "expire_at": 5}, "not both"),
    ({"expire": -1}, "expire must be"),
    ({"expire": 2**32}, "expire must be"),
    ({"expire_at": -5}, "expire_at must be"),
    ({"expire_at": 2**32}, "expire_at must be"),
]


def test_bad_expiry_is_a_clear_error(herd_server):
    with client(herd_server) as c:
        for kw, message in BAD_EXPIRY:
            for call in (lambda: c.set("k", b"v", **kw), lambda: c.set_many({"k": b"v"}, **kw),
                         lambda: c.cas("k", b"v", 1, **kw)):
                with pytest.raises(ValueError, match=message):
                    call()
        assert c.get("k") is None  # nothing was sent
