"""Which fabric a client uses (docs/client.md, "Provider selection"): with the default
provider="auto" a Client and a Cluster reach a tcp server on this host (their first guess, shm,
is refused with the server's provider named, and they follow it);
a client that asks for another fabric or another request transport than the server's is
refused at once, with both named. Real fabkv-server processes (conftest.py)."""
import time

import pytest

import fabkv
from conftest import TIMEOUT_MS

OTHER = {"shm": "tcp", "tcp": "shm"}

# A refusal comes in the handshake: well before the data-path timeout of the refused clients
# below (an unusable fabric used to show as that timeout) could pass. It takes 0.05-0.3 s here,
# but opening tcp alone is ~0.6 s of CPU (tests/client/fault_test.cc), stretched on a loaded
# host: the bound leaves room for that.
REFUSED_WITHIN_S = 3.0
WRONG_CLIENT_TIMEOUT_MS = 6000


@pytest.mark.server
def test_default_provider_reaches_a_tcp_server_on_this_host(start_server, provider):
    if provider != "tcp":
        pytest.skip("auto's first guess, shm, is a shm server's fabric: nothing to follow")
    s = start_server(provider, "herd")
    with fabkv.Client(s.address, timeout_ms=TIMEOUT_MS) as c:
        assert c.provider.split(";")[0] == provider
        c.put("followed", b"the server's fabric")
        assert c.get("followed") == b"the server's fabric"
    with fabkv.Cluster([s.address], timeout_ms=TIMEOUT_MS) as cluster:
        assert cluster.get("followed") == b"the server's fabric"
        cluster.put("by-cluster", b"also")
    with fabkv.Client(s.address, timeout_ms=TIMEOUT_MS) as c:
        assert c.get("by-cluster") == b"also"


@pytest.mark.server
def test_another_fabric_is_refused_at_once_with_both_named(start_server, provider):
    s = start_server(provider, "herd")
    other = OTHER[provider]
    t0 = time.monotonic()
    with pytest.raises(fabkv.ServerGone) as e:
        fabkv.Client(s.address, provider=other, timeout_ms=WRONG_CLIENT_TIMEOUT_MS)
    took = time.monotonic() - t0
    assert f"the server serves {provider}; this client asked for {other}" in str(e.value)
    assert f"--provider {provider}" in str(e.value)
    assert took < REFUSED_WITHIN_S, took


@pytest.mark.server
@pytest.mark.parametrize("served", ["write", "send"])
def test_another_transport_is_refused_at_once_with_both_named(start_server, provider, served):
    s = start_server(provider, "herd", "--transport", served)
    asked = "send" if served == "write" else "write"
    t0 = time.monotonic()
    with pytest.raises(fabkv.ServerGone) as e:
        fabkv.Client(s.address, provider=provider, transport=asked, timeout_ms=WRONG_CLIENT_TIMEOUT_MS)
    took = time.monotonic() - t0
    assert (f"the server takes herd requests by {served} (its --transport); "
            f"this client asked for {asked}") in str(e.value)
    assert took < REFUSED_WITHIN_S, took
    with fabkv.Client(s.address, timeout_ms=TIMEOUT_MS) as c:  # no transport: the server's
        c.put("k", b"v")
        assert c.get("k") == b"v"
