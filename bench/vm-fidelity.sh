#!/usr/bin/env bash
# Fidelity in the guest (issue 11): seed 001's own reproducer
# (mprot_tw4m_regsize.c, built static) against `ptelab vm … bench
# mprotect-toggle`, in guests of one kernel with the same options, in the
# same unit (guest instructions per call under TCG icount).
#
# usage: SEED_FILE=MAIL bench/vm-fidelity.sh [KERNEL]   (default debian:6.17.13; ~3 min)
# MAIL is the seed 001 report that quotes mprot_tw4m_regsize.c between
# "--- cut here ---" lines; ptelab does not ship it. The guests boot with
# transparent_hugepage=never: the reproducer does not ask for its folio size.
set -euo pipefail
cd "$(dirname "$0")/.."
KERNEL=${1:-debian:6.17.13}
SEED=${SEED_FILE:-}
[ -r "$SEED" ] || { echo "set SEED_FILE to the seed 001 mail that quotes mprot_tw4m_regsize.c" >&2; exit 2; }
WORK=$(mktemp -d)
trap 'rm -rf "$WORK"' EXIT
awk '/^mprot_tw4m_regsize.c$/{f=1;next} f&&/^--- cut here ---$/{if(s){exit}s=1;next} f&&s' "$SEED" >"$WORK/mprot_tw4m_regsize.c"
gcc -Wall -O1 -static -o "$WORK/mprot" "$WORK/mprot_tw4m_regsize.c"
cargo build --release -q
P=target/release/ptelab
VM=("$P" vm --kernel "$KERNEL" --append transparent_hugepage=never)
# The reproducer prints the mean over all its calls, which includes whatever
# one-time work the guest's kernel does in that window (seen here: about
# 640M instructions at 40M); ptelab's median over blocks does not. Its
# steady-state cost per call is the marginal one: two runs of N and 5N calls,
# (total(5N) - total(N)) / 4N.
printf '%8s %14s %14s %14s %9s\n' size_kib "repro mean" "repro marginal" ptelab "ptelab/marginal"
"${VM[@]}" --no-store --json -- sweep mprotect-toggle --sizes 400K,4M,40M --folios 4K 2>/dev/null |
    python3 -c 'import json,sys
for c in json.load(sys.stdin)["guests"][0]["cells"]: print(c["size_bytes"]>>10, c["per_call"]["median"])' >"$WORK/ptelab"
total() { # kib calls -> total instructions (the reproducer's runtime in ns)
    "${VM[@]}" --file "$WORK/mprot" -- exec mprot "$1" 1 "$2" 2>/dev/null |
        grep -oP 'Runtime: \K[0-9.]+(?= seconds)' | python3 -c 'import sys; print(float(sys.stdin.read())*1e9)'
}
while read -r kib med; do
    n=$((8192000 / kib)); [ "$n" -lt 200 ] && n=200
    t1=$(total "$kib" "$n")
    t5=$(total "$kib" $((5 * n)))
    python3 -c "m=($t5-$t1)/(4*$n); print(f'{$kib:>8} {$t5/(5*$n):>14.0f} {m:>14.0f} {$med:>14.0f} {$med/m:>9.4f}')"
done <"$WORK/ptelab"
