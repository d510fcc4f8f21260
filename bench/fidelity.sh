#!/usr/bin/env bash
# Fidelity check (issue 2): ptelab's median ns/call for mprotect-toggle vs the
# seed 001 reproducer (mprot_tw4m_regsize.c, gcc -O1), same size, same CPU,
# alternating the two programs in one run.
#
# Each round runs: probe, reproducer, probe, ptelab, probe, where the probe
# (bench/probe.c) is ns per getppid on the same CPU. This machine's kernel
# speed drifts by up to 28% in states lasting seconds (docs/statistics.md,
# "Machine drift"); a round whose three probes agree within 3% ran both
# programs in one state and is "matched". The figure is the median over
# rounds of the per-round ratio ptelab/reproducer, over all rounds and over
# matched ones, with the interquartile range of the ratios.
#
# ptelab prints a median of 10 ms batch means; the reproducer prints the mean
# of all its calls. ptelab's mean is shown too (ratio-1 mean), to tell a
# statistic's difference from a measurement's.
#
# usage: bench/fidelity.sh [ROUNDS] [CPU]   (needs root; ~1 min per 5 rounds)
set -euo pipefail
cd "$(dirname "$0")/.."
ROUNDS=${1:-9}
CPU=${2:-1}
SEED=$(ls ../shared/seeds/001_*.txt 2>/dev/null | head -1)
[ -n "$SEED" ] || { echo "seed 001 not found under ../shared/seeds" >&2; exit 2; }
WORK=$(mktemp -d)
trap 'rm -rf "$WORK"' EXIT
# The reproducer is quoted in the seed between the C file's name and the cut line.
awk '/^mprot_tw4m_regsize.c$/{f=1;next} f&&/^--- cut here ---$/{if(s){exit}s=1;next} f&&s' "$SEED" >"$WORK/mprot_tw4m_regsize.c"
gcc -Wall -O1 -o "$WORK/mprot" "$WORK/mprot_tw4m_regsize.c" 2>/dev/null
gcc -Wall -O2 -o "$WORK/probe" bench/probe.c
cargo build --release -q
PTELAB=target/release/ptelab

probe() { taskset -c "$CPU" "$WORK/probe"; }
run_seed() { # size_kib iters -> ns/call
    taskset -c "$CPU" "$WORK/mprot" "$1" 1 "$2" | grep -oP 'Avg: \K[0-9.]+(?= nsec/call)'
}
run_ptelab() { # size [extra] -> "median mean" ns/call
    "$PTELAB" bench mprotect-toggle --size "$1" --folio 4K --pin "$CPU" --time 1s --no-store --no-flush-count --json "${@:2}" \
        | python3 -c 'import json,sys; n=json.load(sys.stdin)["ns_per_call"]; print(n["median"], n["mean"])'
}
SPECS=${SPECS:-"4000 4000 isolated;40000 400 isolated;4 400000 neighbor;40 100000 neighbor"}
printf '%-8s %-9s %10s %10s %9s %9s %18s %9s %s\n' size_kib placement seed_ns ptelab_ns ratio-1 matched "IQR (matched)" "mean" "rounds"
IFS=';' read -ra specs <<<"$SPECS"
for spec in "${specs[@]}"; do
    read -r kib iters placement <<<"$spec"
    extra=()
    [ "$placement" = neighbor ] && extra=(--neighbor)
    rows=""
    for _ in $(seq "$ROUNDS"); do
        p0=$(probe)
        s=$(run_seed "$kib" "$iters")
        p1=$(probe)
        read -r med mean <<<"$(run_ptelab "${kib}K" "${extra[@]}")"
        p2=$(probe)
        rows+="$s $med $mean $p0 $p1 $p2;"
    done
    python3 - "$kib" "$placement" "$rows" <<'PY'
import statistics as st, sys
kib, placement = sys.argv[1], sys.argv[2]
rows = [list(map(float, r.split())) for r in sys.argv[3].split(";") if r.strip()]
def summary(rs):
    r = sorted(p / s for s, p, *_ in rs)
    if not r:
        return float("nan"), (float("nan"), float("nan"))
    q = st.quantiles(r, n=4) if len(r) >= 4 else [r[0], st.median(r), r[-1]]
    return st.median(r) - 1, (q[0] - 1, q[2] - 1)
matched = [r for r in rows if max(r[3:]) / min(r[3:]) <= 1.03]
allr, _ = summary(rows)
mr, (lo, hi) = summary(matched)
mean_r = st.median(m / s for s, _, m, *_ in (matched or rows)) - 1
print(f"{kib:<8} {placement:<9} {st.median(r[0] for r in rows):10.0f} {st.median(r[1] for r in rows):10.0f} "
      f"{100 * allr:+8.1f}% {100 * mr:+8.1f}% [{100 * lo:+6.1f}%, {100 * hi:+6.1f}%] {100 * mean_r:+8.1f}% "
      f"{len(matched)}/{len(rows)} matched")
PY
done
