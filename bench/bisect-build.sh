#!/usr/bin/env bash
# The build step of `ptelab bisect --repo` on a real kernel tree (issue 13):
# the time of one full out-of-tree build and of one incremental step.
# Not in CI: a kernel build takes long (tens of minutes on 2 cores).
#
# usage: bench/bisect-build.sh [SOURCE.tar.xz] [CONFIG]
#   SOURCE  a kernel source tarball; default: Debian's linux-source-6.12
#           (apt-get install linux-source-6.12 build-essential bc bison flex
#            libelf-dev libssl-dev; ccache makes later runs faster)
#   CONFIG  the config of every build; default: the config of Debian's
#           6.16.12 cloud kernel in ptelab's kernel cache (olddefconfig'd);
#           `defconfig` for the arch's defconfig (far fewer modules)
#
# It makes a git tree of the source with two commits, `good` (the source)
# and `bad` (a comment added to a README, so that the second build is an
# incremental step), and runs `ptelab bisect --repo` between them. Both
# endpoints are built (the figures under "built X in N s"), booted and
# measured; their figures are equal, so the bisect then refuses to go on
# (exit 2, "not separated beyond the noise"), which is what this expects.
set -euo pipefail
cd "$(dirname "$0")/.."
SRC=${1:-$(ls /usr/src/linux-source-6.12.tar.xz 2>/dev/null || true)}
CONFIG=${2:-$(ls -d "${XDG_CACHE_HOME:-$HOME/.cache}"/ptelab/kernels/6.16.12+deb13-cloud-amd64/config 2>/dev/null || true)}
[ -f "$SRC" ] || { echo "no kernel source tarball: apt-get install linux-source-6.12, or pass one" >&2; exit 2; }
[ "$CONFIG" = defconfig ] || [ -f "$CONFIG" ] || { echo "no config: ptelab kernel fetch debian:6.16.12 --arch x86_64, or pass one" >&2; exit 2; }
cargo build --release -q
P=$PWD/target/release/ptelab
WORK=$(mktemp -d)
trap 'rm -rf "$WORK"' EXIT

echo "== unpacking $SRC"
tar -xf "$SRC" -C "$WORK"
TREE=$(find "$WORK" -mindepth 1 -maxdepth 1 -type d | head -1)
git -C "$TREE" init -q -b work
# Debian's linux-source tarball ignores everything but debian/ (`/*` in its
# .gitignore): add the tree regardless.
git -C "$TREE" add -A --force
git -C "$TREE" -c user.name=bench -c user.email=bench@localhost commit -qm good
echo "# bisect-build.sh" >>"$TREE/README"
git -C "$TREE" -c user.name=bench -c user.email=bench@localhost commit -qam bad

# Debian's config builds debug info and BTF: slow, and BTF needs pahole.
# A bisect needs neither.
if [ "$CONFIG" = defconfig ]; then
    CONFIG_ARGS=(--defconfig)
else
    cp "$CONFIG" "$WORK/config"
    "$TREE/scripts/config" --file "$WORK/config" -d DEBUG_INFO_BTF -d DEBUG_INFO_DWARF4 \
        -d DEBUG_INFO_DWARF5 -d DEBUG_INFO_DWARF_TOOLCHAIN_DEFAULT -e DEBUG_INFO_NONE
    CONFIG_ARGS=(--config "$WORK/config")
fi

echo "== ptelab bisect --repo $TREE (cores: $(nproc), ccache: $(command -v ccache || echo none))"
start=$(date +%s)
set +e
"$P" bisect --repo "$TREE" --good HEAD~1 --bad HEAD "${CONFIG_ARGS[@]}" --arch x86_64 \
    --no-store -- bench mprotect-toggle --size 400K --folio 4K 2>&1 | tee "$WORK/log"
code=${PIPESTATUS[0]}
set -e
end=$(date +%s)
echo
grep -E "ptelab: built " "$WORK/log" | sed 's/^ptelab: /step: /'
echo "total $((end - start)) s; exit $code (2 expected: equal endpoints)"
git -C "$TREE" status --short --branch | head -1
