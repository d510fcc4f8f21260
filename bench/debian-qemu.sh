#!/usr/bin/env bash
# Prepare another Debian release's QEMU on this machine, without touching
# the system's apt state or packages: the release's qemu-system-x86 and
# qemu-system-arm with every library they need are downloaded through a
# private apt state and unpacked (dpkg-deb -x, no maintainer scripts) into
# a directory of their own; bin/ there holds qemu-system-x86_64 and
# qemu-system-aarch64 wrappers that run them with that release's own
# dynamic loader, libraries, modules and firmware.
#
#   bench/debian-qemu.sh trixie [DIR]   # Debian 13: QEMU 10.0
#   bench/debian-qemu.sh sid [DIR]      # QEMU 11.x
#
# DIR defaults to ~/.cache/ptelab/qemu/SUITE; the wrappers' directory is
# printed last. Idempotent: a prepared DIR is reused. ptelab's guest tests
# take the wrappers through PTELAB_TEST_QEMUS (docs/guests.md, "QEMU
# versions").
set -euo pipefail
suite="${1:?usage: $0 SUITE [DIR] (SUITE: trixie, sid, ...)}"
dir="${2:-${XDG_CACHE_HOME:-$HOME/.cache}/ptelab/qemu/$suite}"
mirror="${PTELAB_DEBIAN_MIRROR:-http://deb.debian.org/debian}"
keyring=/usr/share/keyrings/debian-archive-keyring.gpg
[ -r "$keyring" ] || { echo "$0: $keyring missing: apt-get install debian-archive-keyring" >&2; exit 2; }
if [ -x "$dir/bin/qemu-system-x86_64" ] && [ -x "$dir/bin/qemu-system-aarch64" ]; then
    echo "$dir/bin"
    exit 0
fi
apt_dir="$dir/apt" root="$dir/root"
rm -rf "$root" "$dir/bin"
mkdir -p "$apt_dir"/{lists/partial,cache/archives/partial,sources.list.d} "$root" "$dir/bin"
: >"$apt_dir/sources.list"
: >"$apt_dir/status"
cat >"$apt_dir/sources.list.d/debian.sources" <<SRC
Types: deb
URIs: $mirror
Suites: $suite
Components: main
Architectures: amd64
Signed-By: $keyring
SRC
opts=(-q -o "Dir::Etc::SourceList=$apt_dir/sources.list" -o "Dir::Etc::SourceParts=$apt_dir/sources.list.d"
    -o "Dir::State::Lists=$apt_dir/lists" -o "Dir::Cache=$apt_dir/cache" -o "Dir::State::Status=$apt_dir/status"
    -o "APT::Architectures::=amd64" -o "Acquire::Languages=none" -o "APT::Install-Recommends=false"
    -o "Debug::NoLocking=true" -o "Dir::Etc::Preferences=/dev/null" -o "Dir::Etc::PreferencesParts=/dev/null")
[ "$(id -u)" = 0 ] && opts+=(-o "APT::Sandbox::User=root")
echo "debian-qemu: $suite's index from $mirror" >&2
LC_ALL=C apt-get "${opts[@]}" update >&2
# With an empty status every dependency down to libc6 is downloaded: the
# release's own loader and libraries, none of this machine's.
echo "debian-qemu: downloading $suite's qemu-system-x86 and qemu-system-arm with their libraries" >&2
LC_ALL=C DEBIAN_FRONTEND=noninteractive apt-get "${opts[@]}" -y --download-only install \
    qemu-system-x86 qemu-system-arm >&2
n=0
for deb in "$apt_dir"/cache/archives/*.deb; do
    dpkg-deb -x "$deb" "$root"
    n=$((n + 1))
done
# Absolute symlinks (firmware: /usr/share/qemu/*.bin -> /usr/share/seabios/...)
# would point at this machine's files: point them into the root.
find "$root" -type l -lname '/*' | while read -r l; do
    ln -sfn "$root$(readlink "$l")" "$l"
done
loader="$root/lib64/ld-linux-x86-64.so.2"
[ -e "$loader" ] || loader="$root/usr/lib64/ld-linux-x86-64.so.2"
libs="$root/usr/lib/x86_64-linux-gnu:$root/lib/x86_64-linux-gnu"
version="$("$loader" --library-path "$libs" "$root/usr/bin/qemu-system-x86_64" --version | head -1)"
for bin in qemu-system-x86_64 qemu-system-aarch64; do
    cat >"$dir/bin/$bin" <<WRAP
#!/bin/sh
# $suite's $bin ($version), unpacked by ptelab's bench/debian-qemu.sh.
QEMU_MODULE_DIR="$root/usr/lib/x86_64-linux-gnu/qemu" exec "$loader" --library-path "$libs" \\
    "$root/usr/bin/$bin" -L "$root/usr/share/qemu" -L "$root/usr/share/seabios" "\$@"
WRAP
    chmod +x "$dir/bin/$bin"
done
rm -rf "$apt_dir/cache/archives"/*.deb
echo "debian-qemu: $n packages unpacked in $root: $version" >&2
echo "$dir/bin"
