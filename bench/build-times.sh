#!/usr/bin/env bash
# What a fresh clone costs to build, for two revisions measured in one run
# on this machine (each a fresh clone with its own target directory; the
# same cargo registry, so downloads are not timed):
#
#   1. the host binary: `cargo build --release`;
#   2. both guest binaries, the way that revision's ptelab builds them (one
#      cargo invocation per arch before the workspace of layer crates, one
#      for both after it; told apart by crates/cli in the manifest);
#   3. a rebuild of the host binary after one report file changes.
#
#   bench/build-times.sh OLD_REV NEW_REV [REPO]
#
# Prints one line per step and revision (seconds of wall-clock time), then
# a Markdown table. The machine should be otherwise
# idle: two cores shared with another build measure the other build too.
set -euo pipefail
old="${1:?usage: $0 OLD_REV NEW_REV [REPO]}"
new="${2:?usage: $0 OLD_REV NEW_REV [REPO]}"
repo="${3:-$(cd "$(dirname "$0")/.." && pwd)}"
work="$(mktemp -d "${TMPDIR:-/tmp}/ptelab-build-times.XXXXXX")"
trap 'rm -rf "$work"' EXIT

# Wall-clock seconds of a command run in DIR (its output kept in a log,
# shown when it fails).
timed() {
    local dir="$1"
    shift
    local t0
    t0=$(date +%s)
    (cd "$dir" && "$@") >"$work/log" 2>&1 || {
        tail -20 "$work/log" >&2
        return 1
    }
    echo $(($(date +%s) - t0))
}

declare -A result
for label in old new; do
    rev="${!label}"
    dir="$work/$label"
    git clone -q --no-checkout "$repo" "$dir"
    git -C "$dir" checkout -q "$rev"
    export CARGO_TARGET_DIR="$dir/target"
    result[$label.host]=$(timed "$dir" cargo build --release -q)
    if grep -q '"crates/cli"' "$dir/Cargo.toml"; then
        result[$label.guests]=$(timed "$dir" cargo build -q --profile guest --bin ptelab \
            --no-default-features --target x86_64-unknown-linux-musl \
            --target aarch64-unknown-linux-musl)
    else
        result[$label.guests]=$(timed "$dir" bash -c '
            for t in x86_64-unknown-linux-musl aarch64-unknown-linux-musl; do
                cargo build -q --profile guest --bin ptelab --no-default-features --target "$t" || exit 1
            done')
    fi
    report=crates/report/src/markdown.rs
    [ -f "$dir/$report" ] || report=src/report/markdown.rs
    echo "// $(date)" >>"$dir/$report"
    result[$label.rebuild]=$(timed "$dir" cargo build --release -q)
    for step in host guests rebuild; do
        echo "$label ($rev) $step: ${result[$label.$step]} s" >&2
    done
    rm -rf "$dir"
done
echo "| step | $old | $new |"
echo "|---|---|---|"
for step in host guests rebuild; do
    echo "| $step | ${result[old.$step]} s | ${result[new.$step]} s |"
done
total_old=$((result[old.host] + result[old.guests]))
total_new=$((result[new.host] + result[new.guests]))
echo "| host and both guests | $total_old s | $total_new s |"
