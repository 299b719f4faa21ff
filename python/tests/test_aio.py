"""fabkv.aio against real fabkv-server processes on each provider (conftest.py): many concurrent
awaits, the whole API, and an event loop that stays free while a request waits."""
import asyncio
import resource
import time

import pytest

import fabkv
import fabkv.aio
from conftest import TIMEOUT_MS, stop_process

pytestmark = pytest.mark.server


@pytest.fixture
def herd_server(start_server, provider):
    return start_server(provider, "herd")


def connect(server, **kw):
    kw.setdefault("timeout_ms", TIMEOUT_MS)
    return fabkv.aio.connect(server.address, provider=server.provider, **kw)


def run(coro, limit=60):
    """Runs coro on a new loop, bounded."""
    return asyncio.run(asyncio.wait_for(coro, limit))


def test_many_concurrent_awaits(herd_server):
    async def main():
        async with await connect(herd_server) as c:
            n = 2000
            await asyncio.gather(*(c.set(f"k{i}", f"v{i}") for i in range(n)))
            got = await asyncio.gather(*(c.get(f"k{i}") for i in range(n)))
            assert got == [f"v{i}".encode() for i in range(n)]
            # Mixed, interleaved: every answer reaches its own await.
            ops = []
            for i in range(n):
                if i % 3 == 0:
                    ops.append(c.delete(f"k{i}"))
                elif i % 3 == 1:
                    ops.append(c.get(f"k{i}"))
                else:
                    ops.append(c.set(f"k{i}", b"new"))
            res = await asyncio.gather(*ops)
            for i, r in enumerate(res):
                assert r == (True if i % 3 == 0 else f"v{i}".encode() if i % 3 == 1 else None), i
            assert await c.get("k0") is None and await c.get("k2") == b"new"
            assert c._c._in_flight == 0 and not c._waiting
    run(main())


def test_the_whole_api(herd_server):
    async def main():
        async with await connect(herd_server) as c:
            assert await c.set_many({"a": b"1", "b": b"2", "c": b"3"}, expire=600) == []
            assert await c.get_many(["a", "b", "x"]) == {"a": b"1", "b": b"2"}
            assert await c.delete_many(["a", "x"]) == 1
            assert await c.get("a") is None and await c.delete("a") is False
            assert await c.gets("nothing") == (None, None)
            value, version = await c.gets("b")
            assert value == b"2" and version > 0
            assert await c.cas("b", b"22", version) is True
            assert await c.cas("b", b"23", version) is False
            assert await c.cas("nothing", b"v", version) is None
            assert await c.get("b") == b"22"
            await c.put("p", b"v", expire_at=int(time.time()) + 600)
            with pytest.raises(ValueError, match="not both"):
                await c.set("k", b"v", expire=1, expire_at=1)
            with pytest.raises(fabkv.TooLarge):
                await c.set("k", b"x" * (10 * 1024 * 1024))
            with pytest.raises(fabkv.InvalidKey):
                await c.get("")
            assert await c.get("p") == b"v"  # still usable after refusals
        assert c.closed
        with pytest.raises(ValueError):
            await c.get("b")
    run(main())


def test_the_loop_runs_while_a_request_waits(herd_server):
    """A request against a stopped server waits for its timeout; meanwhile another task keeps
    ticking, and the loop mostly sleeps (tcp: on the endpoint's descriptor; shm: timers)."""
    timeout = 1.5

    async def main():
        async with await connect(herd_server, timeout_ms=int(timeout * 1000)) as c:
            await c.set("k", b"v")
            ticks = 0

            async def tick():
                nonlocal ticks
                while True:
                    ticks += 1
                    await asyncio.sleep(0.005)

            ticker = asyncio.create_task(tick())
            stop_process(herd_server.proc.pid)
            cpu0, t0 = resource.getrusage(resource.RUSAGE_SELF), time.monotonic()
            with pytest.raises(fabkv.TimeoutError):
                await c.get("k")
            waited = time.monotonic() - t0
            cpu1 = resource.getrusage(resource.RUSAGE_SELF)
            ticker.cancel()
            herd_server.kill()  # not resumed: its late answers are not what this test is about
            return ticks, waited, (cpu1.ru_utime + cpu1.ru_stime) - (cpu0.ru_utime + cpu0.ru_stime)

    ticks, waited, cpu = run(main())
    assert timeout * 0.9 <= waited < timeout + 5
    # A loop blocked by the wait would tick once or never; a free one every 5 ms, fewer on a
    # loaded host (74 of 300 seen while two compilers ran on the two cores).
    assert ticks >= 20, (ticks, waited)
    # Not a spin: the loop slept most of the wait (a spinning one uses one core the whole time).
    assert cpu < waited * 0.5, (cpu, waited)


def test_how_it_is_woken(herd_server):
    """tcp: the endpoint's wait object (a descriptor for add_reader); shm has none (timers)."""
    async def main():
        async with await connect(herd_server) as c:
            return c._fabric_fd, c._control_fd
    fabric_fd, control_fd = run(main())
    assert control_fd >= 0
    assert (fabric_fd >= 0) == (herd_server.provider == "tcp"), fabric_fd
