#!/usr/bin/env bash
# Builds libfabric 2.x, fabkv's fabric library, from Debian's source package into a private
# prefix (default: .deps/libfabric in the checkout) that the build finds through pkg-config.
#
# Why not Debian 12's libfabric-dev (1.17): its shm provider takes the target's process-shared
# spinlock around every post, so a client SIGKILLed at the wrong instant wedges the server
# (docs/fabric.md, "Fault isolation"). Debian's next release carries 2.1.0; only its upstream
# tarball is fetched, through apt with a private sources list (the system's apt sources and
# lists are not touched), and checked against the sha256 of trixie's Sources index.
#
# Idempotent: a prefix that already holds this version is left alone, and a machine whose
# pkg-config already finds libfabric >= 2 is used as it is. Prints the PKG_CONFIG_PATH
# directory to use on its last line (empty when the system's libfabric will do).
set -euo pipefail

VERSION=2.1.0
SHA256=1a66369772d5bb151737214af1c478993e969cf298e8f9ed369e7a2ab8d8c6df
ROOT="$(cd "$(dirname "$0")/.." && pwd)"
PREFIX="${FABKV_LIBFABRIC_PREFIX:-$ROOT/.deps/libfabric}"
STAMP="$PREFIX/.fabkv-libfabric-$VERSION"

if [ -f "$STAMP" ]; then echo "$PREFIX/lib/pkgconfig"; exit 0; fi
if [ -z "${FABKV_LIBFABRIC_PREFIX:-}" ] && pkg-config --atleast-version=2.0 libfabric 2>/dev/null; then
  echo ""; exit 0
fi

SUDO=""
if [ "$(id -u)" -ne 0 ]; then SUDO="sudo"; fi
work="$(mktemp -d)"
trap 'rm -rf "$work"' EXIT
echo "fabkv: building libfabric $VERSION (shm, tcp, rxm, udp, verbs) into $PREFIX" >&2

# A private apt configuration: trixie's source index only, in a directory of our own.
mkdir -p "$work/lists/partial"
echo "deb-src http://deb.debian.org/debian trixie main" > "$work/sources.list"
apt_private=(-o Dir::Etc::sourcelist="$work/sources.list" -o Dir::Etc::sourceparts=-
             -o Dir::State::Lists="$work/lists" -o APT::Sandbox::User=root)
apt-get "${apt_private[@]}" update -qq >&2
uri="$(apt-get "${apt_private[@]}" source --print-uris libfabric/trixie 2>/dev/null |
       awk -v f="libfabric_${VERSION}.orig.tar.xz" '$2 == f { gsub("\047", "", $1); print $1 }')"
[ -n "$uri" ] || { echo "fabkv: trixie's sources list no libfabric $VERSION" >&2; exit 1; }
curl -fsSL --retry 3 -o "$work/libfabric.tar.xz" "$uri"
echo "$SHA256  $work/libfabric.tar.xz" | sha256sum -c --quiet - >&2

tar -C "$work" -xf "$work/libfabric.tar.xz"
cd "$work/libfabric-$VERSION"
{
  ./autogen.sh
  ./configure --prefix="$PREFIX" --disable-static --enable-only \
    --enable-shm --enable-tcp --enable-rxm --enable-udp --enable-verbs
  make -j "$(nproc)"
  rm -rf "$PREFIX"
  make install
} > "$work/build.log" 2>&1 || { tail -40 "$work/build.log" >&2; exit 1; }
touch "$STAMP"
echo "$PREFIX/lib/pkgconfig"
