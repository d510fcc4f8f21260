#!/usr/bin/env bash
# Precision check (issue 2): do repeated `ptelab bench` invocations agree on
# the median? Runs N invocations per size back to back and prints the spread
# of their medians (± half the max/min range), over all invocations and over
# the largest group that ran in one machine state: invocations whose
# kernel-speed probe (median of their blocks' probes, ns per getppid) lies
# within ±1.5% of the group's median probe (docs/statistics.md, "Machine
# drift"), and of the medians divided by their probe.
#
# usage: [TIME=1s] bench/precision.sh [N] [SIZES] [FOLIO]   (needs root; ~2 s + TIME per invocation)
set -euo pipefail
cd "$(dirname "$0")/.."
N=${1:-8}
SIZES=${2:-400K,4M,40M}
FOLIO=${3:-4K}
TIME=${TIME:-1s}  # time budget per invocation (bench --time)
cargo build --release -q
P=target/release/ptelab
printf '%-6s %-6s %12s %10s %10s %10s %14s\n' size folio median_ns all± state± per-probe± "state group"
for size in ${SIZES//,/ }; do
    rows=""
    for _ in $(seq "$N"); do
        rows+="$("$P" bench mprotect-toggle --size "$size" --folio "$FOLIO" --time "$TIME" --no-store --json | python3 -c '
import json, statistics as st, sys
d = json.load(sys.stdin)
print(d["ns_per_call"]["median"], st.median(d["probe_ns"]))');"
    done
    python3 - "$size" "$FOLIO" "$rows" <<'PY'
import statistics as st, sys
size, folio = sys.argv[1], sys.argv[2]
rows = [tuple(map(float, r.split())) for r in sys.argv[3].split(";") if r.strip()]
half = lambda v: 100 * (max(v) / min(v) - 1) / 2
best = []
for _, p in rows:
    group = [r for r in rows if abs(r[1] / p - 1) <= 0.015]
    centre = st.median(g[1] for g in group)
    group = [r for r in rows if abs(r[1] / centre - 1) <= 0.015]
    if len(group) > len(best):
        best = group
meds = [m for m, _ in rows]
# per-probe: each median divided by its invocation's kernel-speed probe
# (the cost in getppid calls), the figure drift normalisation works on.
per_probe = [m / p for m, p in rows]
print(f"{size:<6} {folio:<6} {st.median(meds):12.0f} {half(meds):9.1f}% {half([m for m, _ in best]):9.1f}% "
      f"{half(per_probe):9.1f}% "
      f"{len(best)}/{len(rows)} at {st.median(p for _, p in best):.0f} ns")
PY
done
