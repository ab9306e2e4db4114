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
cargo test --release --workspace
