#!/usr/bin/env bash
# A/A test of `ptelab compare` (issue 5): two back-to-back runs of the same
# sweep should flag no cell as a regression or improvement. Repeats the pair
# N times and counts repetitions with any flagged cell.
#
# usage: bench/aa.sh [REPS] [SIZES] [FOLIOS]   (needs root; ~20 s per repetition)
set -euo pipefail
cd "$(dirname "$0")/.."
REPS=${1:-10}
SIZES=${2:-400K,4M,40M}
FOLIOS=${3:-4K,64K}
cargo build --release -q
P=$PWD/target/release/ptelab
DB=$(mktemp -d)/aa.db
flagged=0
for i in $(seq "$REPS"); do
    "$P" sweep mprotect-toggle --sizes "$SIZES" --folios "$FOLIOS" --time 1s --db "$DB" >/dev/null 2>&1
    "$P" sweep mprotect-toggle --sizes "$SIZES" --folios "$FOLIOS" --time 1s --db "$DB" >/dev/null 2>&1
    s=$("$P" compare latest~1 latest --db "$DB" --json | python3 -c '
import json, sys
d = json.load(sys.stdin)["summary"]
print(d["regressions"], d["improvements"], d["no_change"], d["not_comparable"])')
    read -r reg imp same nc <<<"$s"
    [ $((reg + imp)) -gt 0 ] && flagged=$((flagged + 1))
    echo "repetition $i: $reg regressions, $imp improvements, $same no change, $nc not comparable"
done
echo "A/A: $((REPS - flagged)) of $REPS repetitions flagged no cell"
