#!/usr/bin/env bash
# Fidelity check (issue 2): ptelab's median ns/call for mprotect-toggle vs the
# seed 001 reproducer (mprot_tw4m_regsize.c, gcc -O1), same size, same CPU,
# alternating the two programs in one run.
#
# usage: bench/fidelity.sh [ROUNDS] [CPU]   (needs root; ~2 min with defaults)
set -euo pipefail
cd "$(dirname "$0")/.."
ROUNDS=${1:-5}
CPU=${2:-1}
SEED=$(ls ../shared/seeds/001_*.txt 2>/dev/null | head -1)
[ -n "$SEED" ] || { echo "seed 001 not found under ../shared/seeds" >&2; exit 2; }
WORK=$(mktemp -d)
trap 'rm -rf "$WORK"' EXIT
# The reproducer is quoted in the seed between the C file's name and the cut line.
awk '/^mprot_tw4m_regsize.c$/{f=1;next} f&&/^--- cut here ---$/{if(s){exit}s=1;next} f&&s' "$SEED" >"$WORK/mprot_tw4m_regsize.c"
gcc -Wall -O1 -o "$WORK/mprot" "$WORK/mprot_tw4m_regsize.c" 2>/dev/null
cargo build --release -q
PTELAB=target/release/ptelab

run_seed() { # size_kib iters -> ns/call
    taskset -c "$CPU" "$WORK/mprot" "$1" 1 "$2" | grep -oP 'Avg: \K[0-9.]+(?= nsec/call)'
}
run_ptelab() { # size [extra] -> median ns/call
    "$PTELAB" bench mprotect-toggle --size "$1" --folio 4K --pin "$CPU" --no-store --no-flush-count --json "${@:2}" \
        | python3 -c 'import json,sys; print(json.load(sys.stdin)["ns_per_call"]["median"])'
}
# Per round: seed then ptelab, back to back, so slow host drift hits both;
# the figure is the median over rounds of the per-round ratio ptelab/seed,
# with the interquartile range of those ratios.
SPECS=${SPECS:-"4000 4000 isolated;40000 400 isolated;4 400000 neighbor;40 100000 neighbor"}
printf '%-8s %-10s %12s %12s %9s %16s\n' size_kib placement seed_ns ptelab_ns ratio-1 IQR
IFS=';' read -ra specs <<<"$SPECS"
for spec in "${specs[@]}"; do
    read -r kib iters placement <<<"$spec"
    extra=()
    [ "$placement" = neighbor ] && extra=(--neighbor)
    s=(); p=()
    for _ in $(seq "$ROUNDS"); do
        s+=("$(run_seed "$kib" "$iters")")
        p+=("$(run_ptelab "${kib}K" "${extra[@]}")")
    done
    python3 - "$kib" "$placement" "${s[*]}" "${p[*]}" <<'PY'
import statistics as st, sys
kib, placement = sys.argv[1], sys.argv[2]
s = [float(x) for x in sys.argv[3].split()]
p = [float(x) for x in sys.argv[4].split()]
r = sorted(b / a for a, b in zip(s, p))
q = st.quantiles(r, n=4) if len(r) >= 4 else [r[0], st.median(r), r[-1]]
print(f"{kib:<8} {placement:<10} {st.median(s):12.0f} {st.median(p):12.0f} {100*(st.median(r)-1):+8.1f}% "
      f"[{100*(q[0]-1):+.1f}%, {100*(q[2]-1):+.1f}%]")
PY
done
