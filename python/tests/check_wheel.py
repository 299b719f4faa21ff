"""`pip install ./python` into a fresh virtual environment, then `import fabkv` there with no
LD_LIBRARY_PATH and one round trip against a real fabkv-server (ctest python_wheel,
python/CMakeLists.txt; docs/python.md, "Getting it").

    check_wheel.py --server-bin build/bin/fabkv-server --build-dir build/python-wheel [--keep]

The wheel's CMake build goes to --build-dir (scikit-build-core's build-dir setting), which is
kept between runs, and compiles through ccache when it is on PATH: a second run recompiles
nothing, and a first one finds the build tree's objects in ccache when that tree was compiled
through ccache too (same compile lines: --cmake-define FABKV_WERROR=...). pip's build isolation fetches scikit-build-core and pybind11 from the package index.
Every step has a timeout; the venv is made in a temporary folder and removed at the end.
"""
import argparse
import os
import pathlib
import shutil
import subprocess
import sys
import tempfile
import time

PYTHON_DIR = pathlib.Path(__file__).resolve().parents[1]

# What the venv's python runs: the round trip, the RUNPATH's libfabric, the plugin's entry point,
# the type information, the papers' numbers (paper.toml, package data).
ROUND_TRIP = r"""
import importlib.metadata, pathlib, subprocess, sys
import fabkv, fabkv.aio
package = pathlib.Path(fabkv.__file__).parent
assert package.parent != pathlib.Path(sys.argv[2]), fabkv.__file__
for typed in ("py.typed", "_fabkv.pyi"):  # mypy reads the installed package's types
    assert (package / typed).is_file(), typed
import fabkv.paper  # the papers' numbers: paper.toml is package data, read from the package
assert fabkv.paper.PAPER_TOML.parent == package, fabkv.paper.PAPER_TOML
assert len(fabkv.paper.load()) >= 20
maps = pathlib.Path("/proc/self/maps").read_text()
print("libfabric:", sorted({l.split()[-1] for l in maps.splitlines() if "libfabric" in l}))
eps = importlib.metadata.entry_points()
group = eps.select(group="pytest11") if hasattr(eps, "select") else eps.get("pytest11", [])
assert any(e.value == "fabkv.pytest_plugin" for e in group), list(group)
server = subprocess.Popen([sys.argv[1], "--provider", "tcp", "--listen", "127.0.0.1:0",
                           "--workers", "1", "--cores", "-1", "--log", "warn"],
                          stdout=subprocess.PIPE, text=True)
try:
    address = server.stdout.readline().split()[1]
    with fabkv.Client(address, provider="tcp", timeout_ms=10000) as c:
        c.set("wheel", b"round trip", expire=60)
        assert c.get_many(["wheel", "none"]) == {"wheel": b"round trip"}
    print("round trip ok:", fabkv.__file__)
finally:
    server.terminate()
    server.wait(timeout=10)
"""


def run(argv, timeout, **kw):
    t = time.monotonic()
    print("+", " ".join(str(a) for a in argv), flush=True)
    subprocess.run(argv, check=True, timeout=timeout, **kw)
    print(f"  ({time.monotonic() - t:.1f} s)", flush=True)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--server-bin", required=True)
    ap.add_argument("--build-dir", required=True)
    ap.add_argument("--python", default=sys.executable)
    ap.add_argument("--cmake-define", action="append", default=[],
                    help="NAME=VALUE for the wheel's CMake (the build tree's FABKV_WERROR, so that "
                         "the compile lines are the build tree's and ccache finds its objects)")
    args = ap.parse_args()

    env = {k: v for k, v in os.environ.items()
           if k not in ("LD_LIBRARY_PATH", "PYTHONPATH", "PYTHONHOME", "VIRTUAL_ENV")}
    if shutil.which("ccache"):
        env.setdefault("CMAKE_CXX_COMPILER_LAUNCHER", "ccache")
        env.setdefault("CMAKE_C_COMPILER_LAUNCHER", "ccache")
        # The objects' debug info names their build folder; without this, ccache would take
        # that folder into its key, and the build tree's objects would never match.
        env.setdefault("CCACHE_NOHASHDIR", "1")
    defines = [f"--config-settings=cmake.define.{d}" for d in args.cmake_define]
    with tempfile.TemporaryDirectory(prefix="fabkv-wheel-") as tmp:
        venv = pathlib.Path(tmp) / "venv"
        run([args.python, "-m", "venv", venv], 120, env=env)
        py = venv / "bin" / "python"
        run([py, "-m", "pip", "install", "--disable-pip-version-check", "--no-cache-dir",
             "--config-settings=build-dir=" + args.build_dir, *defines, str(PYTHON_DIR)], 900,
            env=env)
        # From an empty folder, so that nothing of the source tree can be imported instead.
        run([py, "-c", ROUND_TRIP, args.server_bin, str(PYTHON_DIR)], 60, env=env, cwd=tmp)


if __name__ == "__main__":
    main()
