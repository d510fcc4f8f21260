#!/usr/bin/env bash
# Clean kernel builds of one tree revision, ptelab's config against the
# arch's defconfig, both arches, in one run (issue 32's goal: ptelab's at
# most a third of defconfig's). Each build starts from an empty cache (its
# own XDG_CACHE_HOME: no image, build directory or clone) with ccache
# disabled, and the figure is ptelab's own "built … in N s" (config and
# image; the clone is not counted). Not in CI: it takes most of an hour on
# 2 cores.
#
# usage: bench/tree-build-times.sh TREE [REV]
#   TREE  a kernel git tree (e.g. Debian's linux-source-7.3 committed as a
#         base, docs/trees.md)
#   REV   the revision to build (default HEAD)
set -euo pipefail
cd "$(dirname "$0")/.."
TREE=${1:?usage: bench/tree-build-times.sh TREE [REV]}
REV=${2:-HEAD}
cargo build --release -q
P=$PWD/target/release/ptelab
echo "tree $TREE@$REV ($(git -C "$TREE" rev-parse --short "$REV")), $(nproc) CPUs, $(gcc --version | head -1)"
for arch in x86_64 arm64; do
    for config in defconfig ptelab; do
        cache=$(mktemp -d /var/tmp/ptelab-build-times.XXXXXX)
        flag=()
        [ "$config" = defconfig ] && flag=(--defconfig)
        if XDG_CACHE_HOME=$cache CCACHE_DISABLE=1 "$P" kernel fetch "tree:$TREE@$REV" \
            --arch "$arch" "${flag[@]}" >"$cache.out" 2>"$cache.err"; then
            secs=$(sed -n 's/^ptelab: built .* in \([0-9]*\) s$/\1/p' "$cache.err")
            files=$(grep -c '^  CC\|^  AS' "$cache"/ptelab/builds/logs/*.log || true)
            echo "$arch $config: ${secs} s, ${files} files compiled"
        else
            echo "$arch $config: failed: $(tail -1 "$cache.err")"
        fi
        rm -rf "$cache" "$cache.out" "$cache.err"
    done
done
