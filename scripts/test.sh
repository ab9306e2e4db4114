#!/usr/bin/env bash
# Runs every test on a fresh or prepared machine: installs what the tests
# need (compilers, the torch wheel and demo trainer), builds the release
# tracer and analyzer, then runs all test suites.
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
