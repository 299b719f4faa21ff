"""fabkv.pytest_plugin: a user's own test suite run by pytest (a subprocess, as a user runs it)
with the fabkv_server fixture, on each provider; the server it started is gone afterwards."""
import os
import subprocess
import sys
import textwrap

import pytest

import fabkv
from conftest import PROVIDERS, SERVER_BIN

# The fabkv under test, importable from the user's folder too.
PYTHONPATH = os.pathsep.join([os.path.dirname(os.path.dirname(fabkv.__file__)),
                              os.environ.get("PYTHONPATH", "")])

USER_TESTS = textwrap.dedent('''
    import fabkv

    def test_round_trip(fabkv_server, tmp_path_factory):
        with open({pids!r}, "a") as f:
            f.write(f"{{fabkv_server.pid}}\\n")
        assert fabkv_server.provider == {provider!r}
        with fabkv.Client(fabkv_server.address, provider=fabkv_server.provider,
                          timeout_ms=10000) as c:
            c.set("user", b"test")
            assert c.get("user") == b"test"

    def test_a_second_server(fabkv_server_factory):
        s = fabkv_server_factory(args=["--protocols", "pilaf"])
        with open({pids!r}, "a") as f:
            f.write(f"{{s.pid}}\\n")
        with fabkv.Client(s.address, protocol="pilaf", provider=s.provider,
                          timeout_ms=10000) as c:
            assert c.get("none") is None
''')


@pytest.mark.server
@pytest.mark.parametrize("provider", PROVIDERS)
def test_a_users_suite_gets_real_servers(tmp_path, provider):
    pids = tmp_path / "pids"
    (tmp_path / "test_user.py").write_text(USER_TESTS.format(pids=str(pids), provider=provider))
    env = dict(os.environ, FABKV_SERVER_BIN=SERVER_BIN, PYTHONPATH=PYTHONPATH)
    r = subprocess.run(
        [sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", "-p",
         "fabkv.pytest_plugin", "--fabkv-provider", provider, "test_user.py"],
        cwd=tmp_path, env=env, capture_output=True, text=True, timeout=120)
    assert r.returncode == 0, r.stdout + r.stderr
    assert "2 passed" in r.stdout, r.stdout
    started = [int(p) for p in pids.read_text().split()]
    assert len(started) == 2
    for pid in started:  # stopped at teardown, and reaped: no such process now
        with pytest.raises(ProcessLookupError):
            os.kill(pid, 0)


def test_a_server_that_does_not_start_is_a_clear_error(tmp_path):  # no server: python_module
    (tmp_path / "test_user.py").write_text("def test_x(fabkv_server):\n    pass\n")
    env = dict(os.environ, FABKV_SERVER_BIN="/bin/false", PYTHONPATH=PYTHONPATH)
    r = subprocess.run(
        [sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", "-p",
         "fabkv.pytest_plugin", "--fabkv-start-timeout", "5", "test_user.py"],
        cwd=tmp_path, env=env, capture_output=True, text=True, timeout=120)
    assert r.returncode == 1, r.stdout + r.stderr
    assert "/bin/false --provider" in r.stdout and "did not start" in r.stdout, r.stdout
