"""fabkv.Cluster: many real fabkv-servers (conftest.py), each key on its ketama server, checked
key by key against the servers themselves and against pylibmc (libmemcached's ketama_weighted)
writing into the servers' memcached front ends. The tests without the server mark need no
server (python_module)."""
import os
import signal
import socket
import time

import pylibmc
import pytest

import fabkv
from conftest import TIMEOUT_MS, Ticker, stop_process

NKEYS = 3000


def start_three(start_server, provider):
    """Three servers, each with a memcached listener: each one's ring name is then the ketama
    name of its memcached address, "127.0.0.1:PORT" (src/server/server.cc, default_name)."""
    return [start_server(provider, "herd", "--memcached", "127.0.0.1:0") for _ in range(3)]


def cluster_of(servers, weights=(1, 1, 1), **kw):
    kw.setdefault("timeout_ms", TIMEOUT_MS)
    spec = [f"{s.address}:{w} {s.memcached}" for s, w in zip(servers, weights)]
    return fabkv.Cluster(spec, provider=servers[0].provider, **kw)


def direct(servers):
    return [fabkv.Client(s.address, provider=s.provider, timeout_ms=TIMEOUT_MS) for s in servers]


def holders(clients, key):
    """The indices of the servers that have key, read from each directly."""
    return [i for i, c in enumerate(clients) if c.get(key) is not None]


@pytest.mark.server
def test_every_key_is_on_exactly_its_server(start_server, provider):
    servers = start_three(start_server, provider)
    clients = direct(servers)
    with cluster_of(servers) as c:
        assert [s["name"] for s in c.servers] == [s.memcached for s in servers]
        keys = [f"key-{i}" for i in range(NKEYS)]
        for k in keys:
            c.put(k, k.encode() + b"-value")
        per_server = [0, 0, 0]
        for k in keys:
            i = c.server_for_key(k)
            assert holders(clients, k) == [i], k
            assert c.servers_for_key(k) == [i]
            per_server[i] += 1
        assert all(n > NKEYS / 5 for n in per_server), per_server
        got = c.get_multi(keys + ["never-written"])
        assert len(got) == NKEYS and "never-written" not in got
        assert c.get_multi([b"key-1", bytearray(b"key-2"), "key-3"]) == {
            b"key-1": b"key-1-value", b"key-2": b"key-2-value", "key-3": b"key-3-value"}
        assert got["key-17"] == b"key-17-value"
        assert c.get("key-17") == b"key-17-value" and c.get("never-written") is None
        assert c.delete("key-17") is True and c.delete("key-17") is False
        assert holders(clients, "key-17") == []
        st = c.stats()
        assert sum(s["requests"] for s in st["servers"]) >= 2 * NKEYS
        assert all(s["connected"] and s["failures"] == 0 for s in st["servers"])
    assert c.closed
    with pytest.raises(ValueError, match="closed"):
        c.get("key-1")
    for cl in clients:
        cl.close()


@pytest.mark.server
def test_put_multi_stores_every_key_on_its_server(start_server, provider):
    servers = start_three(start_server, provider)
    clients = direct(servers)
    with cluster_of(servers) as c:
        items = {f"pm-{i}": f"v{i}".encode() for i in range(NKEYS)}
        items[b"pm-bytes"] = bytearray(b"b")
        assert c.put_multi(items) == []
        assert c.get_multi(list(items)) == {k: bytes(v) for k, v in items.items()}
        for k in list(items)[::50]:
            assert holders(clients, k) == [c.server_for_key(k)], k
        with pytest.raises(fabkv.TooLarge):
            c.put_multi({"x" * 251: b"v"})
        with pytest.raises(TypeError):
            c.put_multi([("k", b"v")])
    for cl in clients:
        cl.close()


@pytest.mark.server
@pytest.mark.parametrize("weights", [(1, 1, 1), (1, 2, 1)])
def test_pylibmc_and_fabkv_place_every_key_alike(start_server, provider, weights):
    servers = start_three(start_server, provider)
    clients = direct(servers)
    # pylibmc takes a weight as "host:port:weight" (pylibmc/client.py, translate_server_spec).
    mc = pylibmc.Client([f"{s.memcached}:{w}" for s, w in zip(servers, weights)],
                        behaviors={"ketama_weighted": True})
    with cluster_of(servers, weights) as c:
        per_server = [0, 0, 0]
        for i in range(NKEYS):
            k = f"pylibmc-{i}"
            v = f"value {i} from pylibmc".encode()
            assert mc.set(k, v)
            where = c.server_for_key(k)
            assert holders(clients, k) == [where], k
            assert c.get(k) == v
            per_server[where] += 1
        expected = weights[1] / sum(weights)  # the middle server's share of the ring
        assert abs(per_server[1] / NKEYS - expected) < 0.1, per_server
        # And the other way: what fabkv.Cluster writes, pylibmc finds.
        for i in range(300):
            c.put(f"fabkv-{i}", f"value {i} from fabkv")
        found = mc.get_multi([f"fabkv-{i}" for i in range(300)])
        assert found == {f"fabkv-{i}": f"value {i} from fabkv".encode() for i in range(300)}
    mc.disconnect_all()
    for cl in clients:
        cl.close()


@pytest.mark.server
def test_a_server_named_otherwise_is_refused_with_both_names(start_server, provider):
    servers = start_three(start_server, provider)[:2]
    spec = [f"{servers[0].address} {servers[0].memcached}", f"{servers[1].address} cache-b"]
    with fabkv.Cluster(spec, provider=provider, timeout_ms=TIMEOUT_MS) as c:
        key = next(k for k in (f"k{i}" for i in range(1000)) if c.server_for_key(k) == 1)
        with pytest.raises(fabkv.Error) as e:
            c.put(key, b"v")
        assert e.value.status is fabkv.Status.ERROR
        assert f"'{servers[1].memcached}'" in str(e.value) and "'cache-b'" in str(e.value)
        assert "cache-b" in c.stats()["servers"][1]["last_error"]
    # Without a name the list calls it by its control address: refused as well.
    spec = [f"{servers[0].address} {servers[0].memcached}", servers[1].address]
    with fabkv.Cluster(spec, provider=provider, timeout_ms=TIMEOUT_MS) as c:
        key = next(k for k in (f"k{i}" for i in range(1000)) if c.server_for_key(k) == 1)
        with pytest.raises(fabkv.Error, match=servers[1].memcached):
            c.get(key)


@pytest.mark.server
def test_replicas_hold_each_key_on_both_of_its_servers(start_server, provider):
    servers = start_three(start_server, provider)
    clients = direct(servers)
    with cluster_of(servers, replicas=2) as c:
        pairs = set()
        for i in range(500):
            k = f"r{i}"
            c.put(k, b"twice")
            two = c.servers_for_key(k)
            assert len(two) == 2 and two[0] == c.server_for_key(k)
            assert holders(clients, k) == sorted(two), k
            pairs.add(tuple(sorted(two)))
        assert len(pairs) == 3  # every pair of servers holds some keys
        assert c.delete("r7") is True
        assert holders(clients, "r7") == []
        with pytest.raises(fabkv.Error, match="replicas=1"):
            c.put("r8", b"v", version=1)
    for cl in clients:
        cl.close()


@pytest.mark.server
def test_replicas_refuse_a_write_fewer_servers_would_hold(start_server, provider):
    """replicas=2 and one of the two servers gone: a write raises ServerGone, saying so, and is
    not made (an acknowledged write is on two servers); reads go on from the one left."""
    live = start_server(provider, "herd", "--memcached", "127.0.0.1:0")
    with socket.socket() as s:  # bound, not listening: refused at once
        s.bind(("127.0.0.1", 0))
        gone = f"127.0.0.1:{s.getsockname()[1]}"
        with fabkv.Cluster([f"{live.address} {live.memcached}", gone], provider=provider,
                           timeout_ms=TIMEOUT_MS, replicas=2, server_failure_limit=1,
                           retry_timeout_ms=60000) as c, \
                fabkv.Client(live.address, provider=provider, timeout_ms=TIMEOUT_MS) as d:
            with pytest.raises(fabkv.ServerGone):
                c.put("first", b"v")  # refused by the second server, which is ejected
            assert c.stats()["servers"][1]["ejected"]
            assert c.get("first") == b"v"  # the live server took it all the same
            with pytest.raises(fabkv.ServerGone, match="fewer than replicas=2") as e:
                c.put("second", b"v")
            assert gone in str(e.value)
            assert d.get("second") is None
            with pytest.raises(fabkv.ServerGone):
                c.delete("first")
            assert c.get("first") == b"v"
            with pytest.raises(fabkv.ServerGone):
                c.put_multi({"third": b"v"})
            assert d.get("third") is None


@pytest.mark.server
def test_a_dead_server_costs_only_its_keys(start_server, provider):
    servers = start_three(start_server, provider)
    with cluster_of(servers, timeout_ms=2000) as c:
        keys = [f"d{i}" for i in range(300)]
        for k in keys:
            c.put(k, k)
        on = {k: c.server_for_key(k) for k in keys}
        servers[2].kill()
        t0 = time.monotonic()
        got = c.get_multi(keys)
        assert time.monotonic() - t0 < 30
        assert set(got) == {k for k in keys if on[k] != 2}
        st = c.stats()["servers"][2]
        assert st["failures"] >= 1 and st["last_error"]


@pytest.mark.server
def test_delete_multi_says_how_many_keys_it_could_not_delete(start_server, provider):
    servers = start_three(start_server, provider)
    # Not ejected: the dead server's keys stay its own (with ejection they would move to the
    # others, where a delete finds nothing).
    with cluster_of(servers, timeout_ms=1000, auto_eject_hosts=False) as c:
        keys = [f"dm{i}" for i in range(60)]
        c.put_multi({k: b"v" for k in keys})
        on = {k: c.server_for_key(k) for k in keys}
        assert c.delete_multi(keys[:10] + ["dm-missing"]) == 10
        servers[2].kill()
        dead = sum(1 for k in keys[10:] if on[k] == 2)
        assert 0 < dead < 50
        with pytest.raises(fabkv.Error, match=f"{dead} of 50 keys failed"):
            c.delete_many(keys[10:])
        # The live servers' keys are gone all the same.
        assert c.get_multi([k for k in keys if on[k] != 2]) == {}


@pytest.mark.server
def test_a_hung_server_times_out_its_keys_with_the_gil_released(start_server, provider):
    servers = start_three(start_server, provider)
    with cluster_of(servers, timeout_ms=1500) as c:
        key = next(k for k in (f"h{i}" for i in range(1000)) if c.server_for_key(k) == 1)
        other = next(k for k in (f"h{i}" for i in range(1000)) if c.server_for_key(k) == 0)
        c.put(key, b"v")
        c.put(other, b"w")
        stop_process(servers[1].proc.pid)
        try:
            with Ticker() as ticker:
                t0 = time.monotonic()
                with pytest.raises(fabkv.TimeoutError) as e:
                    c.get(key)
                waited = time.monotonic() - t0
                assert c.get(other) == b"w"  # the others still answer
        finally:
            os.kill(servers[1].proc.pid, signal.SIGCONT)
        assert servers[1].address in str(e.value)
        assert 1.0 <= waited < 15
        assert ticker.ticks > 100  # the other thread ran while get() waited


@pytest.mark.server
def test_from_file(start_server, provider, tmp_path):
    servers = start_three(start_server, provider)
    f = tmp_path / "cluster.toml"
    listed = ", ".join(f'"{s.address} {s.memcached}"' for s in servers)
    f.write_text(f'servers = [{listed}]\nprovider = "{provider}"\ntimeout_ms = {TIMEOUT_MS}\n'
                 "replicas = 2\n")
    with fabkv.Cluster.from_file(str(f)) as c:
        assert [s["address"] for s in c.servers] == [s.address for s in servers]
        c.put("from-file", b"yes")
        assert c.get("from-file") == b"yes"
        assert len(c.servers_for_key("from-file")) == 2


# ---- no server needed


def test_bad_lists_are_refused():
    with pytest.raises(ValueError, match="at least one server"):
        fabkv.Cluster([])
    with pytest.raises(ValueError, match="HOST:PORT"):
        fabkv.Cluster("127.0.0.1:7000,no-port")
    with pytest.raises(ValueError, match="two servers named 'a'"):
        fabkv.Cluster(["127.0.0.1:7000 a", "127.0.0.1:7001 a"])
    with pytest.raises(ValueError, match="replicas"):
        fabkv.Cluster(["127.0.0.1:7000"], replicas=2)
    with pytest.raises(ValueError, match="pilaf-vo"):
        fabkv.Cluster(["127.0.0.1:7000"], protocol="carrier-pigeon")
    with pytest.raises(TypeError):
        fabkv.Cluster([7000])


def test_placement_needs_no_server():
    c = fabkv.Cluster("127.0.0.1:1 a, 127.0.0.1:2:2 b,127.0.0.1:11211")
    assert c.servers == [{"address": "127.0.0.1:1", "name": "a", "weight": 1},
                         {"address": "127.0.0.1:2", "name": "b", "weight": 2},
                         {"address": "127.0.0.1:11211", "name": "127.0.0.1", "weight": 1}]
    same = fabkv.Cluster(["127.0.0.1:5 a", "127.0.0.1:6:2 b", "10.1.1.1:11211 127.0.0.1"])
    for i in range(1000):
        assert c.server_for_key(f"k{i}") == same.server_for_key(f"k{i}".encode())
    assert c.server_for_key("ключ") == c.server_for_key("ключ".encode())
    assert "3 servers" in repr(c)
    c.close()
    assert c.closed and "closed" in repr(c)


def test_from_file_errors(tmp_path):
    with pytest.raises(FileNotFoundError):
        fabkv.Cluster.from_file(str(tmp_path / "none.toml"))
    f = tmp_path / "bad.toml"
    f.write_text('servers = ["127.0.0.1:1"]\ncolour = "blue"\n')
    with pytest.raises(ValueError, match=r"bad.toml:2: unknown key 'colour'"):
        fabkv.Cluster.from_file(str(f))


def test_no_server_reachable_raises_and_then_none_is_left():
    with socket.socket() as s:  # bound, not listening: refused at once
        s.bind(("127.0.0.1", 0))
        addr = f"127.0.0.1:{s.getsockname()[1]}"
        c = fabkv.Cluster([addr], provider="tcp", timeout_ms=2000, server_failure_limit=1,
                          retry_timeout_ms=60000)
        with pytest.raises(fabkv.ServerGone) as e:
            c.get_multi(["a", "b"])
        assert addr in str(e.value) and "all 2 keys failed" in str(e.value)
        assert c.server_for_key("a") is None  # ejected after one failure
        with pytest.raises(fabkv.ServerGone, match="no server left"):
            c.put("a", b"v")
        assert c.stats()["servers"][0]["ejected"]
