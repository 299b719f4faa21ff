"""The fabkv module without a server: the protocol list, statuses and exceptions."""
import pathlib
import re
import socket

import pytest

import fabkv
from fabkv import errors

ROOT = pathlib.Path(__file__).resolve().parents[2]


def test_protocols_are_the_registrys():
    registry = (ROOT / "src" / "proto" / "registry.h").read_text()
    names = re.findall(r'^\s+X\(\w+, "([\w-]+)"', registry, re.M)
    assert fabkv.protocols() == names
    assert {"herd", "server-reply", "pilaf", "seq-rpc"} <= set(names)
    info = {p["name"]: p for p in fabkv.protocol_info()}
    assert list(info) == names
    assert info["pilaf-vo"]["server_side"] == "pilaf"
    assert info["seq-atomic"]["sequencer"] and not info["herd"]["sequencer"]


def test_status_numbers_are_the_c_apis():
    header = (ROOT / "src" / "client" / "fabkv.h").read_text()
    c = {m[0]: int(m[1]) for m in re.findall(r"FABKV_(\w+) = (\d+)", header)}
    for s in fabkv.Status:
        assert c[s.name] == s.value, s


@pytest.mark.parametrize("status,cls,builtin", [
    (fabkv.Status.TIMEOUT, fabkv.TimeoutError, TimeoutError),
    (fabkv.Status.SERVER_GONE, fabkv.ServerGone, ConnectionError),
    (fabkv.Status.TOO_LARGE, fabkv.TooLarge, ValueError),
    (fabkv.Status.INVALID_KEY, fabkv.InvalidKey, ValueError),
    (fabkv.Status.NO_SPACE, fabkv.NoSpace, fabkv.Error),
    (fabkv.Status.ERROR, fabkv.Error, Exception),
    (99, fabkv.Error, Exception),
])
def test_error_classes(status, cls, builtin):
    e = errors.error_for(int(status), "fabkv: what happened")
    assert type(e) is cls and isinstance(e, builtin) and isinstance(e, fabkv.Error)
    assert str(e) == "fabkv: what happened"
    assert e.status == (status if status != 99 else fabkv.Status.ERROR)


def test_nobody_listening_raises_server_gone():
    with socket.socket() as s:  # a port that is bound but not listening: refused at once
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
        with pytest.raises(fabkv.ServerGone) as e:
            fabkv.Client(f"127.0.0.1:{port}", provider="tcp", timeout_ms=2000)
    assert e.value.status is fabkv.Status.SERVER_GONE


def test_bad_arguments():
    with pytest.raises(fabkv.Error, match="HOST:PORT"):
        fabkv.Client("no-port", timeout_ms=100)
    with pytest.raises(TypeError):
        fabkv.Client("127.0.0.1:1", "herd")  # protocol is keyword-only
