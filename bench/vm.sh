#!/usr/bin/env bash
# Guest figures (issue 11): repeatability of `ptelab vm` instruction counts
# across invocations, idle and with the other core busy; boot-plus-one-cell
# time per arch; two kernels with --jobs 2 against one kernel.
#
# usage: bench/vm.sh [RUNS]   (needs QEMU and the kernels below cached:
#        ptelab kernel fetch debian:6.16.12 debian:6.17.13 --arch x86_64, and --arch arm64)
set -euo pipefail
cd "$(dirname "$0")/.."
RUNS=${1:-5}
cargo build --release -q
P=target/release/ptelab
WORK=$(mktemp -d)
BUSY=""
cleanup() { [ -n "$BUSY" ] && kill "$BUSY" 2>/dev/null; rm -rf "$WORK"; }
trap cleanup EXIT

sweep() { # kernel -> "size median" lines
    "$P" vm --kernel "$1" --no-store --json -- sweep mprotect-toggle --sizes 400K,4M,40M --folios 4K 2>/dev/null |
        python3 -c 'import json,sys
for c in json.load(sys.stdin)["guests"][0]["cells"]: print(c["size_bytes"]>>10, c["per_call"]["median"])'
}

echo "== repeatability: $RUNS invocations of mprotect-toggle 4K on debian:6.17.13 (x86_64), instructions per call"
for load in idle busy; do
    if [ "$load" = busy ]; then
        (while :; do :; done) &
        BUSY=$!
    fi
    for i in $(seq "$RUNS"); do sweep debian:6.17.13 | sed "s/^/$load $i /"; done >>"$WORK/rep"
    if [ -n "$BUSY" ]; then kill "$BUSY"; BUSY=""; fi
done
python3 - "$WORK/rep" <<'PY'
import sys, collections
by = collections.defaultdict(list)
for line in open(sys.argv[1]):
    load, _, kib, med = line.split()
    by[int(kib)].append((load, float(med)))
print(f"{'size_kib':>8} {'runs':>4} {'min':>12} {'max':>12} {'spread':>8}  (idle and busy pooled)")
for kib, v in sorted(by.items()):
    xs = [m for _, m in v]
    print(f"{kib:>8} {len(xs):>4} {min(xs):>12.1f} {max(xs):>12.1f} {100*(max(xs)/min(xs)-1):>7.3f}%")
PY

echo "== boot plus one cell (bench mprotect-toggle --size 4M), seconds"
for k in debian:6.17.13-x86_64 debian:6.17.13-arm64; do
    /usr/bin/time -f %e -o "$WORK/t" "$P" vm --kernel "$k" --no-store -- bench mprotect-toggle --size 4M --folio 4K >/dev/null 2>&1
    echo "$k $(cat "$WORK/t")"
done

echo "== one kernel vs two with --jobs 2 (sweep 400K,4M,40M x 4K,64K), seconds"
/usr/bin/time -f %e -o "$WORK/t" "$P" vm --kernel debian:6.17.13 --no-store -- sweep mprotect-toggle --sizes 400K,4M,40M --folios 4K,64K >/dev/null 2>&1
one=$(cat "$WORK/t")
/usr/bin/time -f %e -o "$WORK/t" "$P" vm --kernel debian:6.16.12,debian:6.17.13 --jobs 2 --no-store -- sweep mprotect-toggle --sizes 400K,4M,40M --folios 4K,64K >/dev/null 2>&1
two=$(cat "$WORK/t")
python3 -c "print(f'one kernel {float(\"$one\"):.1f} s, two kernels --jobs 2 {float(\"$two\"):.1f} s: {float(\"$two\")/float(\"$one\"):.2f}x')"
