"""fabkv for asyncio: a Client whose awaits never block the event loop.

    import fabkv.aio

    async def main():
        async with await fabkv.aio.connect("127.0.0.1:7000", provider="tcp") as c:
            await c.set("k", b"v", expire=60)
            await c.get("k")                           # b"v"
            await asyncio.gather(*(c.get(k) for k in keys))
            await c.get_many(keys)                     # {key: value} of those found

How it runs (docs/python.md, "asyncio"): the C++ client's asynchronous calls (get_async,
put_async, del_async, src/client/client.h) are posted and driven from the loop's own thread;
nothing of the client runs in another thread once connected. Between two rounds of progress the
loop is free. It is woken
- on tcp by the endpoint's wait object (a descriptor that becomes readable when the server's
  bytes arrive) and the control connection, both registered with loop.add_reader, and a timer
  of at most 10 ms that ends the requests past their deadline;
- on shm, which has no wait object, by a timer that polls again after 50 us, doubling up to
  1 ms while nothing arrives (the blocking client's "adaptive" mode, client.h), back to 50 us
  as soon as something does.
At most one window of requests is posted at a time (the server's "window" slots per worker, one
when the protocol names none); the rest wait in a queue of the loop, so that posting never has
to wait for a free slot. Every request is bounded by timeout_ms, as in the blocking Client.
"""
from __future__ import annotations

import asyncio
import collections
import time
from typing import Deque, Dict, Iterable, List, Mapping, Optional, Tuple, TypeVar, Union, cast

from . import _fabkv
from .errors import Status

Key = Union[str, bytes, bytearray, memoryview]
Value = Union[str, bytes, bytearray, memoryview]
_K = TypeVar("_K", bound=Key)

_GET, _PUT, _DEL = 0, 1, 2
_FIRST_SLEEP = 50e-6  # shm: the first pause between polls, doubled while nothing arrives
_MAX_SLEEP = 1e-3     # ... up to this
_BACKSTOP = 10e-3     # tcp: the longest pause without a look at deadlines
_EXPIRE_EVERY = 5e-3  # how often the requests past their deadline are ended, at most


class _Request:
    __slots__ = ("kind", "op", "key", "value", "version", "expire_at", "future")

    def __init__(self, kind: int, op: str, key: Key, value: Optional[Value], version: int,
                 expire_at: int, future: "asyncio.Future[Tuple[int, bytes, int]]") -> None:
        self.kind = kind
        self.op = op
        self.key = key
        self.value = value
        self.version = version
        self.expire_at = expire_at
        self.future = future


class Client:
    """An asyncio client of one fabkv-server; made by `await fabkv.aio.connect(...)`.

    The same calls as fabkv.Client, each a coroutine. Use it from the loop it was connected on.
    """

    def __init__(self, client: _fabkv.Client, loop: asyncio.AbstractEventLoop) -> None:
        self._c = client
        self._loop = loop
        layout = client.layout
        self._window = max(1, int(layout.get("window", 1) or 1))
        # answers: herd's datagram endpoint (--herd-responses dgram), -1 otherwise.
        self._fabric_fd, self._control_fd, self._answers_fd = client._wait_fds()
        self._queue: Deque[_Request] = collections.deque()
        self._waiting: Dict[int, _Request] = {}
        self._readers = False
        self._timer: Optional[asyncio.TimerHandle] = None
        self._soon: Optional[asyncio.Handle] = None
        self._sleep = _FIRST_SLEEP
        self._last_expire = time.monotonic()
        self._closed = False

    # ---- the API -------------------------------------------------------------------------
    async def get(self, key: Key) -> Optional[bytes]:
        """The value of key, or None when there is no such key."""
        status, value, _ = await self._request(_GET, "get", key)
        return None if status == Status.NOT_FOUND else value

    async def gets(self, key: Key) -> Tuple[Optional[bytes], Optional[int]]:
        """(value, version), or (None, None) when there is no such key."""
        status, value, version = await self._request(_GET, "gets", key)
        return (None, None) if status == Status.NOT_FOUND else (value, version)

    async def set(self, key: Key, value: Value, *, expire: Optional[int] = None,
                  expire_at: Optional[int] = None) -> None:
        """Stores value under key. expire: seconds from now, or expire_at: absolute Unix
        seconds (not both); 0 or neither = never."""
        await self._request(_PUT, "put", key, value, 0, _fabkv._expiry(expire, expire_at))

    put = set

    async def cas(self, key: Key, value: Value, cas: int, *, expire: Optional[int] = None,
                  expire_at: Optional[int] = None) -> Optional[bool]:
        """Stores value only if key still has version cas (from gets): True stored, False it
        has another version now, None there is no such key."""
        at = _fabkv._expiry(expire, expire_at)
        if cas <= 0:
            raise ValueError("fabkv: cas needs the version gets returned, not 0")
        status, _, _ = await self._request(_PUT, "cas", key, value, cas, at,
                                           (Status.VERSION_MISMATCH,))
        if status == Status.VERSION_MISMATCH:
            return False
        return None if status == Status.NOT_FOUND else True

    async def delete(self, key: Key) -> bool:
        """Deletes key; True when it was there, False when it was not."""
        status, _, _ = await self._request(_DEL, "delete", key)
        return status == Status.OK

    async def get_many(self, keys: Iterable[_K]) -> Dict[_K, bytes]:
        """{key: value} of the keys found, keyed as given (all posted at once)."""
        given = list(keys)
        got = await asyncio.gather(*(self._request(_GET, "get_many", k) for k in given))
        return {cast(_K, _hashable(k)): v for k, (s, v, _) in zip(given, got) if s == Status.OK}

    async def set_many(self, mapping: Mapping[_K, Value], *, expire: Optional[int] = None,
                       expire_at: Optional[int] = None) -> List[_K]:
        """Stores every key: value; returns the keys not stored because the store is full."""
        at = _fabkv._expiry(expire, expire_at)
        given = list(mapping.keys())
        got = await asyncio.gather(*(self._request(_PUT, "set_many", k, mapping[k], 0, at,
                                                   (Status.NO_SPACE,)) for k in given))
        return [k for k, (s, _, _) in zip(given, got) if s == Status.NO_SPACE]

    async def delete_many(self, keys: Iterable[Key]) -> int:
        """Deletes every key; returns how many were there."""
        got = await asyncio.gather(*(self._request(_DEL, "delete_many", k) for k in keys))
        return sum(1 for s, _, _ in got if s == Status.OK)

    @property
    def provider(self) -> str:
        return self._c.provider

    @property
    def server(self) -> str:
        return self._c.server

    @property
    def closed(self) -> bool:
        return self._closed

    async def close(self) -> None:
        """Closes the connection (in a worker thread: closing waits briefly for the requests
        in flight). Requests still waiting raise fabkv.ServerGone."""
        if self._closed:
            return
        self._closed = True
        self._stop_waking()
        gone = self._c._error(int(Status.SERVER_GONE), "closed")
        for r in list(self._waiting.values()) + list(self._queue):
            if not r.future.done():
                r.future.set_exception(gone)
        self._waiting.clear()
        self._queue.clear()
        await self._loop.run_in_executor(None, self._c.close)

    async def __aenter__(self) -> "Client":
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.close()

    def __repr__(self) -> str:
        return f"<fabkv.aio.Client at {self.server}{' (closed)' if self._closed else ''}>"

    # ---- the driver ----------------------------------------------------------------------
    async def _request(self, kind: int, op: str, key: Key, value: Optional[Value] = None,
                       version: int = 0, expire_at: int = 0,
                       answers: Tuple[Status, ...] = ()) -> Tuple[int, bytes, int]:
        """Posts one request (or queues it behind a full window) and awaits its
        (status, value, version); raises for a status other than OK, NOT_FOUND and `answers`."""
        if self._closed:
            raise ValueError("fabkv: the client is closed")
        future: "asyncio.Future[Tuple[int, bytes, int]]" = self._loop.create_future()
        self._queue.append(_Request(kind, op, key, value, version, expire_at, future))
        self._post()
        self._wake_soon()
        status, value_out, version_out = await future
        if status not in (Status.OK, Status.NOT_FOUND) and status not in answers:
            raise self._c._error(status, op)
        return status, value_out, version_out

    def _post(self) -> None:
        while self._queue and len(self._waiting) < self._window:
            r = self._queue.popleft()
            if r.future.cancelled():
                continue
            try:
                token = self._c._submit(r.kind, r.key, r.value, r.version, r.expire_at)
            except Exception as e:  # refused before sending (TooLarge, InvalidKey, TypeError)
                r.future.set_exception(e)
                continue
            self._waiting[token] = r

    def _pump(self) -> None:
        """One round: progress, answers handed to their futures, queued requests posted, and
        the next wake-up arranged."""
        self._soon = None
        if self._closed:
            return
        now = time.monotonic()
        expire = now - self._last_expire >= _EXPIRE_EVERY
        if expire:
            self._last_expire = now
        finished = self._c._poll(expire)
        for token, status, value, version in finished:
            r = self._waiting.pop(token, None)
            if r is not None and not r.future.done():
                r.future.set_result((status, value, version))
        self._post()
        self._arrange(bool(finished))

    def _arrange(self, progressed: bool) -> None:
        if self._timer is not None:
            self._timer.cancel()
            self._timer = None
        if not self._waiting:
            self._stop_waking()
            return
        if progressed:
            self._sleep = _FIRST_SLEEP
            self._wake_soon()
            return
        if self._fabric_fd >= 0:
            if not self._readers:
                self._loop.add_reader(self._fabric_fd, self._pump)
                if self._control_fd >= 0:
                    self._loop.add_reader(self._control_fd, self._pump)
                if self._answers_fd >= 0:
                    self._loop.add_reader(self._answers_fd, self._pump)
                self._readers = True
            if self._c._can_wait():  # fi_trywait: safe to wait for the descriptor now
                self._timer = self._loop.call_later(_BACKSTOP, self._pump)
            else:
                self._wake_soon()
        else:
            self._timer = self._loop.call_later(self._sleep, self._pump)
            self._sleep = min(self._sleep * 2, _MAX_SLEEP)

    def _wake_soon(self) -> None:
        if self._soon is None:
            self._soon = self._loop.call_soon(self._pump)

    def _stop_waking(self) -> None:
        if self._readers:
            self._loop.remove_reader(self._fabric_fd)
            if self._control_fd >= 0:
                self._loop.remove_reader(self._control_fd)
            if self._answers_fd >= 0:
                self._loop.remove_reader(self._answers_fd)
            self._readers = False
        if self._timer is not None:
            self._timer.cancel()
            self._timer = None
        if self._soon is not None:
            self._soon.cancel()
            self._soon = None


def _hashable(key: Key) -> Key:
    return bytes(key) if isinstance(key, (bytearray, memoryview)) else key


async def connect(server: str = "127.0.0.1:7000", *, protocol: str = "herd",
                  provider: str = "auto", transport: str = "", secret: str = "",
                  timeout_ms: int = 2000, connect_timeout_ms: Optional[int] = None) -> Client:
    """Connects (the handshake runs in a worker thread, bounded by connect_timeout_ms) and
    returns a Client driven from the running loop. The keywords are fabkv.Client's."""
    loop = asyncio.get_running_loop()

    def blocking() -> _fabkv.Client:
        return _fabkv.Client(server, protocol=protocol, provider=provider, transport=transport,
                             secret=secret, timeout_ms=timeout_ms,
                             connect_timeout_ms=connect_timeout_ms, poll="adaptive")

    return Client(await loop.run_in_executor(None, blocking), loop)


__all__ = ["Client", "connect", "Key", "Value"]
