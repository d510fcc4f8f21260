#!/usr/bin/env bash
# Machine drift (docs/statistics.md, "Machine drift"): does kernel-mode speed
# drift on this machine, and does the kernel-speed probe (getppid) track it?
# Prints 5 s window medians and, per probe, the coefficient of variation
# across windows, max/min and the correlation with mprotect of 4 MiB.
#
# usage: bench/drift.sh [SECONDS] [CPU]   (default 150 s on CPU 1)
set -euo pipefail
cd "$(dirname "$0")/.."
SECS=${1:-150}
CPU=${2:-1}
WORK=$(mktemp -d)
trap 'rm -rf "$WORK"' EXIT
gcc -O2 -Wall -o "$WORK/drift" bench/drift.c
taskset -c "$CPU" "$WORK/drift" "$SECS" >"$WORK/out.txt"
python3 - "$WORK/out.txt" <<'PY'
import math, statistics as st, sys
lines = open(sys.argv[1]).read().split("\n")
cols = lines[0].split()[1:]
rows = [list(map(float, l.split())) for l in lines[1:] if l.strip()]
win = {}
for r in rows:
    win.setdefault(int(r[0] // 5), []).append(r[1:])
meds = [[st.median(c) for c in zip(*win[k])] for k in sorted(win) if len(win[k]) >= 20]
print("window_s " + " ".join(f"{c:>16}" for c in cols))
for i, m in enumerate(meds):
    print(f"{5 * i:>8} " + " ".join(f"{x:16.3f}" for x in m))
def corr(a, b):
    ma, mb = st.mean(a), st.mean(b)
    num = sum((x - ma) * (y - mb) for x, y in zip(a, b))
    return num / math.sqrt(sum((x - ma) ** 2 for x in a) * sum((y - mb) ** 2 for y in b))
ref = [m[2] for m in meds]
series = {c: [m[i] for m in meds] for i, c in enumerate(cols)}
series["mprotect_4m / getppid"] = [m[2] / m[1] for m in meds]
series["mprotect_400k / getppid"] = [m[3] / m[1] for m in meds]
print(f"\n{'probe':<26} {'CV':>6} {'max/min':>8} {'corr(mprotect_4m)':>18}")
for c, v in series.items():
    print(f"{c:<26} {100 * st.pstdev(v) / st.mean(v):5.1f}% {max(v) / min(v):8.3f} {corr(v, ref):18.2f}")
PY
