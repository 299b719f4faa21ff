#!/usr/bin/env bash
# Installs the Debian packages fabkv needs to build, test and run its demo, then libfabric 2.x
# from Debian's source package (scripts/install-libfabric.sh; it needs the autotools, rdma-core's
# headers for the verbs provider, curl and xz below).
# Idempotent and quiet when everything is present; uses sudo when not root.
set -euo pipefail

PACKAGES=(
  g++ clang libclang-rt-14-dev cmake ninja-build pkg-config make
  autoconf automake libtool libibverbs-dev librdmacm-dev curl xz-utils ca-certificates
  libgtest-dev libbenchmark-dev libabsl-dev
  libcli11-dev libtomlplusplus-dev nlohmann-json3-dev libfmt-dev libspdlog-dev
  libxxhash-dev libisal-dev libssl-dev
  clang-format
  memcached redis-server libmemcached-tools libmemcached-dev python3-pylibmc python3-pymemcache
  nutcracker
  iproute2 python3 python3-matplotlib
  python3-dev python3-venv pybind11-dev python3-pytest python3-mypy
)

missing=()
for p in "${PACKAGES[@]}"; do
  if ! dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed"; then
    missing+=("$p")
  fi
done
ROOT="$(cd "$(dirname "$0")/.." && pwd)"
if [ ${#missing[@]} -eq 0 ]; then exec "$ROOT/scripts/install-libfabric.sh" >/dev/null; fi

SUDO=""
if [ "$(id -u)" -ne 0 ]; then SUDO="sudo"; fi
echo "fabkv: installing Debian packages: ${missing[*]}"
export DEBIAN_FRONTEND=noninteractive
$SUDO apt-get update -qq
$SUDO apt-get install -y -qq --no-install-recommends "${missing[@]}" >/dev/null
exec "$ROOT/scripts/install-libfabric.sh" >/dev/null
