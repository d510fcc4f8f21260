#!/usr/bin/env bash
# A/A test of `ptelab compare` (issue 5): two back-to-back runs of the same
# sweep should flag no cell as a regression or improvement. Repeats the pair
# N times and counts repetitions with any flagged cell.
#
# With CALIBRATE=1 (default) it first runs `ptelab calibrate` on the same grid
# into the same database, so compare takes this machine's measured
# between-run repeatability as its noise threshold (docs/statistics.md,
# "Calibrating the noise threshold"); CALIBRATE=0 keeps the 2% default.
#
# usage: [RUNS=1] [CALIBRATE=1] [DB=PATH] bench/aa.sh [REPS] [SIZES] [FOLIOS]   (needs root; ~25 s per repetition,
#        plus the calibration: 8 runs spread over 3 minutes, SPAN=0 for back to back)
set -euo pipefail
cd "$(dirname "$0")/.."
REPS=${1:-10}
SIZES=${2:-400K,4M,40M}
FOLIOS=${3:-4K,64K}
cargo build --release -q
P=$PWD/target/release/ptelab
# DB=PATH keeps the runs (and pools its earlier calibrations); default: a fresh one.
DB=${DB:-$(mktemp -d)/aa.db}
# Each pair is compared twice: as `compare` does by default (same kernel:
# corrected for machine drift with the kernel-speed probe) and raw
# (--normalize none), so one run gives both figures.
if [ "${CALIBRATE:-1}" = 1 ]; then
    "$P" calibrate --sizes "$SIZES" --folios "$FOLIOS" --time 1s --span "${SPAN:-3m}" --db "$DB" | tail -1
fi
# RUNS=N (N > 1): each side is N back-to-back sweeps (A A A B B B), compared
# as sets of runs (`compare 1,2,3 4,5,6`: Student's t on run medians, no
# calibration used; docs/statistics.md "Replicated comparisons").
RUNS=${RUNS:-1}
side() { # first last -> "latest~first,...,latest~last"
    seq -s, -f 'latest~%g' "$1" -1 "$2"
}
if [ "$RUNS" -gt 1 ]; then
    A=$(side $((2 * RUNS - 1)) "$RUNS")
    B=$(side $((RUNS - 1)) 0)
else
    A=latest~1
    B=latest
fi
flagged=0
flagged_raw=0
summary() { # normalize -> "reg imp same nc drift%"
    "$P" compare "$A" "$B" --db "$DB" --json --normalize "$1" | python3 -c '
import json, sys
d = json.load(sys.stdin)
s, p = d["summary"], d["drift"]
drift = 100 * (p["probe_b_ns"] / p["probe_a_ns"] - 1) if p["probe_a_ns"] and p["probe_b_ns"] else float("nan")
print(s["regressions"], s["improvements"], s["no_change"], s["not_comparable"], f"{drift:+.1f}")'
}
for i in $(seq "$REPS"); do
    for _ in $(seq $((2 * RUNS))); do
        "$P" sweep mprotect-toggle --sizes "$SIZES" --folios "$FOLIOS" --time 1s --db "$DB" >/dev/null 2>&1
    done
    read -r reg imp same nc drift <<<"$(summary auto)"
    read -r rreg rimp _ _ _ <<<"$(summary none)"
    [ $((reg + imp)) -gt 0 ] && flagged=$((flagged + 1))
    [ $((rreg + rimp)) -gt 0 ] && flagged_raw=$((flagged_raw + 1))
    echo "repetition $i: $reg regressions, $imp improvements, $same no change, $nc not comparable" \
        "(probe drift ${drift}%; raw: $rreg regressions, $rimp improvements)"
done
echo "A/A: $((REPS - flagged)) of $REPS repetitions flagged no cell" \
    "(raw, --normalize none: $((REPS - flagged_raw)) of $REPS)"
