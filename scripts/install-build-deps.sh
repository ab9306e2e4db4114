#!/usr/bin/env bash
# Installs what building and testing the tracer and analyzer need: a C and C++
# compiler for the test programs. Fast when everything is already there.
set -euo pipefail

missing=()
command -v cc >/dev/null 2>&1 || missing+=(gcc libc6-dev)
command -v c++ >/dev/null 2>&1 || missing+=(g++)
command -v cargo >/dev/null 2>&1 || { echo "install-build-deps: cargo is not on PATH; install the Rust toolchain (rustup) first" >&2; exit 1; }
if ((${#missing[@]})); then
    echo "install-build-deps: installing ${missing[*]}"
    apt-get update -qq
    DEBIAN_FRONTEND=noninteractive apt-get install -y -qq "${missing[@]}"
fi
