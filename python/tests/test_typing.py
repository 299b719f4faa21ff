"""py.typed and the extension's stubs (fabkv/_fabkv.pyi): mypy checks a user's script against
them, accepting correct use and reporting a type error. mypy is $FABKV_MYPY (a command, set by
python/CMakeLists.txt: the build's python's mypy, else Debian's python3-mypy)."""
import os
import pathlib
import shlex
import subprocess
import sys

import pytest

import fabkv

PACKAGE_PARENT = pathlib.Path(fabkv.__file__).resolve().parents[1]

GOOD = '''
import asyncio
from typing import Dict, List, Optional, Tuple
import fabkv
import fabkv.aio

def sync(address: str) -> Optional[bool]:
    with fabkv.Client(address, provider="tcp", timeout_ms=500) as c:
        c.set("k", b"v", expire=10)
        c.put(b"k2", "v", expire_at=0)
        found: Dict[str, bytes] = c.get_many(["k", "x"])
        failed: List[str] = c.set_many({"a": b"1"}, expire=5)
        deleted: int = c.delete_many(["a"])
        pair: Tuple[Optional[bytes], Optional[int]] = c.gets("k")
        if pair[1] is None:
            return None
        return c.cas("k", b"w", pair[1])

async def main(address: str) -> None:
    async with await fabkv.aio.connect(address, provider="shm") as c:
        value = await c.get("k")
        if value is not None:
            print(value.decode())
        many: Dict[str, bytes] = await c.get_many(["k"])
        await c.set_many({"a": b"x"}, expire=5)
'''

BAD = '''
import fabkv

def f(c: fabkv.Client) -> str:
    return c.get("k")
'''


@pytest.fixture(scope="module")
def cache(tmp_path_factory):
    """One mypy cache for both runs: the second reuses the first's analysis of the library."""
    return tmp_path_factory.mktemp("mypy-cache")


def mypy(tmp_path, cache, name, text):
    script = tmp_path / name
    script.write_text(text)
    command = shlex.split(os.environ.get("FABKV_MYPY") or f"{sys.executable} -m mypy")
    env = dict(os.environ, MYPYPATH=str(PACKAGE_PARENT))
    return subprocess.run(
        [*command, "--strict", "--no-error-summary", "--cache-dir", str(cache),
         "--python-version", f"{sys.version_info[0]}.{sys.version_info[1]}", str(script)],
        capture_output=True, text=True, timeout=300, env=env, cwd=tmp_path)


def test_mypy_accepts_correct_use(tmp_path, cache):
    r = mypy(tmp_path, cache, "good.py", GOOD)
    assert r.returncode == 0, r.stdout + r.stderr


def test_mypy_reports_a_type_error(tmp_path, cache):
    r = mypy(tmp_path, cache, "bad.py", BAD)
    assert r.returncode == 1, r.stdout + r.stderr
    assert 'Incompatible return value type (got "Optional[bytes]", expected "str")' in r.stdout, \
        r.stdout
