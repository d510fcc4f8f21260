#!/usr/bin/env bash
# Two guest binaries, the same figures? One cell per workload in guests of
# one kernel on both arches, each cell booted once with binary A and once
# with binary B (PTELAB_GUEST_BINARY_*), everything else equal. Prints
# guest instructions per call (median; a phase per column where a workload
# has several) and whether the two agree to the last instruction.
#
# usage: bench/guest-binaries.sh DIR_A DIR_B [KERNEL]
#   DIR_A, DIR_B: target directories holding
#   {x86_64,aarch64}-unknown-linux-musl/guest/ptelab (two revisions' or two
#   profiles' `cargo build --profile guest --bin ptelab --no-default-features
#   --target x86_64-unknown-linux-musl --target aarch64-unknown-linux-musl`);
#   KERNEL defaults to debian:6.17.13 (cached: ptelab kernel fetch).
# About 16 TCG boots: 3 minutes here.
set -euo pipefail
cd "$(dirname "$0")/.."
A="${1:?usage: $0 DIR_A DIR_B [KERNEL]}"
B="${2:?usage: $0 DIR_A DIR_B [KERNEL]}"
KERNEL="${3:-debian:6.17.13}"
cargo build --release -q
P=target/release/ptelab
CELLS=(
    "mprotect-toggle --size 400K --folio 4K"
    "mprotect-ro-rw --size 4M --folio 64K"
    "prot-transition --size 400K --folio 64K"
    "mremap-move --size 1M --folio 64K"
)
figures() { # DIR ARCH CELL... -> the cell's medians, comma-separated
    local dir="$1" arch="$2"
    shift 2
    PTELAB_GUEST_BINARY_X86_64="$dir/x86_64-unknown-linux-musl/guest/ptelab" \
        PTELAB_GUEST_BINARY_ARM64="$dir/aarch64-unknown-linux-musl/guest/ptelab" \
        "$P" vm --kernel "$KERNEL" --arch "$arch" --accel tcg --no-store --json -- bench "$@" 2>/dev/null |
        python3 -c 'import json,sys
cells=json.load(sys.stdin)["guests"][0]["cells"]
print(",".join("%.1f" % c["per_call"]["median"] for c in cells))'
}
same=0
all=0
printf '%-8s %-42s %-24s %-24s %s\n' arch cell A B same
for arch in x86_64 arm64; do
    for cell in "${CELLS[@]}"; do
        # shellcheck disable=SC2086
        a=$(figures "$A" "$arch" $cell)
        # shellcheck disable=SC2086
        b=$(figures "$B" "$arch" $cell)
        all=$((all + 1))
        verdict=no
        if [ "$a" = "$b" ]; then
            verdict=yes
            same=$((same + 1))
        fi
        printf '%-8s %-42s %-24s %-24s %s\n' "$arch" "$cell" "$a" "$b" "$verdict"
    done
done
echo "$same of $all cells the same to the last instruction"
