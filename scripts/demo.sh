#!/usr/bin/env bash
# The leak finder on a training job with a planted leak, end to end:
# builds the tracer and the analyzer, sets up demo-trainer, trains under the
# tracer and prints the report.
#
#   scripts/demo.sh [LEAK] [-- extra demo-trainer flags]
#
# LEAK is one of loss-history (default), batch-cache, grad-snapshots, none.
# Output goes to out/demo/ (DEMO_OUT overrides): trace.bin, the report and the
# flamegraph of leaked bytes, leaks.svg.
set -euo pipefail

ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
LEAK="${1:-loss-history}"
[ $# -gt 0 ] && shift
[ "${1:-}" = "--" ] && shift
OUT="${DEMO_OUT:-$ROOT/out/demo}"
mkdir -p "$OUT"
OUT="$(cd "$OUT" && pwd)"

step() { printf '\n==> %s\n' "$*"; }

step "building the tracer and the analyzer (cargo build --release)"
(cd "$ROOT" && cargo build --release)

step "setting up demo-trainer (scripts/setup-demo.sh)"
"$ROOT/scripts/setup-demo.sh"

TRACER="$ROOT/target/release/libtracer.so"
ANALYZER="$ROOT/target/release/analyzer"
TRAINER="$ROOT/demo-trainer/target/release/demo-trainer"
TRACE="$OUT/trace.bin"
rm -f "$TRACE" "$TRACE".* "$OUT/leaks.svg" "$OUT/report.txt"

step "training with --leak $LEAK under the tracer"
echo "LD_PRELOAD=$TRACER TRACER_OUTPUT=$TRACE $TRAINER --leak $LEAK --workers 2 --accumulate 4 $*"
(
    cd "$OUT"
    LD_PRELOAD="$TRACER" TRACER_OUTPUT="$TRACE" \
        "$TRAINER" --leak "$LEAK" --workers 2 --accumulate 4 "$@"
)

step "analyzer report $TRACE"
"$ANALYZER" report "$TRACE" -o "$OUT/leaks.svg" | tee "$OUT/report.txt"

step "done"
echo "trace:      $TRACE"
echo "report:     $OUT/report.txt"
echo "flamegraph: $OUT/leaks.svg"
