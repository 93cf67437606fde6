#!/usr/bin/env bash
# Minimizes a grown corpus before it is committed: `cargo fuzz cmin` on
# edges (no hit counts), then a greedy edge cover of at most 200 files
# (fuzz/cover.py). Hand-written seeds and crash inputs (names that are not
# 40 hex digits) are always kept. Run from the repo root, on nightly:
#   fuzz/minimize.sh <target> [max-files]
set -euo pipefail
cd "$(dirname "$0")/.."
t=$1
max=${2:-200}
corpus=fuzz/corpus/$t
keep=$(mktemp -d)
# cmin drops the seeds when fuzzed inputs cover them: set them aside.
find "$corpus" -maxdepth 1 -type f ! -regex '.*/[0-9a-f]\{40\}' -exec cp {} "$keep" \;
cargo +nightly fuzz cmin "$t" -- -use_counters=0
cp "$keep"/* "$corpus"/ 2>/dev/null || true
rm -rf "$keep"
out=$(mktemp -d)
ctl=$(mktemp -u)
fuzz/target/x86_64-unknown-linux-gnu/release/"$t" -merge=1 -use_counters=0 \
  -merge_control_file="$ctl" "$out" "$corpus" 2>/dev/null
rm -rf "$out"
python3 fuzz/cover.py "$ctl" "$corpus" "$max"
rm -f "$ctl"
