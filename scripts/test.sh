#!/usr/bin/env bash
# Runs every test on a fresh or prepared machine: installs what the tests
# need (compilers, the torch wheel and demo trainer), builds the release
# tracer and analyzer, runs all test suites, then the benchmark harness's
# quick mode with every tool it compares.
set -euo pipefail
root="$(cd "$(dirname "$0")/.." && pwd)"
cd "$root"

scripts/install-build-deps.sh
scripts/setup-demo.sh
cargo build --release --workspace
cargo test --release --workspace --no-fail-fast
# demo-trainer is outside the workspace (it links libtorch): its own tests.
(
    cd demo-trainer
    LIBTORCH_USE_PYTORCH=1 VIRTUAL_ENV="$root/.venv" PATH="$root/.venv/bin:$PATH" cargo test --release
)
# The benchmark harness, in its quick mode (tiny sizes, one round): every
# configuration, heaptrack's and memray's too, must run and be reported.
scripts/bench/run.sh --quick --strict --workloads alloc,torch-solo --sample-bytes 512k --out target/bench-smoke
