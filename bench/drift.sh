#!/usr/bin/env bash
# Machine drift (docs/statistics.md, "Machine drift"): does kernel-mode speed
# drift on this machine, and does the kernel-speed probe (getppid) track it?
# Prints 5 s window medians and, per probe, the coefficient of variation
# across windows, max/min and the correlations with mprotect of 4 MiB and of
# 40 MiB (whose 640 KiB of struct pages also make it memory-latency bound).
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
col = {c: [m[i] for m in meds] for i, c in enumerate(cols)}
series = dict(col)
series["mprotect_4m / getppid"] = [a / b for a, b in zip(col["mprotect_4m_ns"], col["getppid_ns"])]
series["mprotect_400k / getppid"] = [a / b for a, b in zip(col["mprotect_400k_ns"], col["getppid_ns"])]
print(f"\n{'probe':<26} {'CV':>6} {'max/min':>8} {'corr(4M)':>9} {'corr(40M)':>10}")
for c, v in series.items():
    print(f"{c:<26} {100 * st.pstdev(v) / st.mean(v):5.1f}% {max(v) / min(v):8.3f} "
          f"{corr(v, col['mprotect_4m_ns']):9.2f} {corr(v, col['mprotect_40m_ns']):10.2f}")
PY
