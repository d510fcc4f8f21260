#!/usr/bin/env bash
# The cost of --profile (docs/guests.md, "Mechanism counters"): the wall time
# of seed 001's sweep in a guest with ptelab's QEMU plugin against without,
# alternated (plain, profiled, plain, profiled, ...) so that machine drift
# falls on both alike; and that the plugin leaves the instruction figures as
# they are.
#
# usage: bench/profile-cost.sh [PAIRS] [KERNEL]   (needs QEMU and the kernel
#        cached for both arches: ptelab kernel fetch debian:6.17.8 --arch x86_64,
#        and --arch arm64)
set -euo pipefail
cd "$(dirname "$0")/.."
PAIRS=${1:-2}
KERNEL=${2:-debian:6.17.8}
cargo build --release -q
P=target/release/ptelab
WORK=$(mktemp -d)
trap 'rm -rf "$WORK"' EXIT
SWEEP=(sweep mprotect-toggle --sizes 4K,40K,400K,4000K,40000K --folios 4K)

run() { # arch, mode -> "seconds figures…"
    local flag=()
    [ "$2" = profiled ] && flag=(--profile)
    local t0 t1
    t0=$(date +%s.%N)
    "$P" vm --kernel "$KERNEL" --arch "$1" "${flag[@]}" --no-store --json -- "${SWEEP[@]}" \
        >"$WORK/out.json" 2>"$WORK/err"
    t1=$(date +%s.%N)
    python3 - "$t0" "$t1" "$WORK/out.json" <<'PY'
import json, sys
t0, t1, f = float(sys.argv[1]), float(sys.argv[2]), sys.argv[3]
g = json.load(open(f))["guests"][0]
figs = " ".join(f'{c["size_bytes"] >> 10}K={c["per_call"]["median"]:.1f}' for c in g["cells"])
print(f"{t1 - t0:.1f} {g['boot_to_exit_s']:.1f} {figs}")
PY
}

for arch in x86_64 arm64; do
    # A first profiled boot sends the kernel's symbols once; not a sample.
    run "$arch" profiled >/dev/null
    for i in $(seq "$PAIRS"); do
        for mode in plain profiled; do
            echo "$arch $mode $(run "$arch" "$mode")" | tee -a "$WORK/all"
        done
    done
done
echo
python3 - "$WORK/all" <<'PY'
import sys, collections, statistics
rows = collections.defaultdict(list)
figs = collections.defaultdict(set)
for line in open(sys.argv[1]):
    arch, mode, wall, boot, *f = line.split()
    rows[(arch, mode)].append(float(boot))
    figs[(arch, mode)].add(" ".join(f))
for arch in ("x86_64", "arm64"):
    p, q = rows[(arch, "plain")], rows[(arch, "profiled")]
    if not p or not q:
        continue
    ratio = statistics.median(q) / statistics.median(p)
    same = figs[(arch, "plain")] == figs[(arch, "profiled")]
    print(f"{arch}: QEMU start to exit, median plain {statistics.median(p):.1f} s, profiled "
          f"{statistics.median(q):.1f} s: {ratio:.2f}x; instruction figures identical: {same}")
PY
