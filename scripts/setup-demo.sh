#!/usr/bin/env bash
# Sets up the demonstration training jobs:
#   - a project-local Python venv (.venv at the repository root) with the torch
#     version that demo-trainer's tch crate is built for (scripts/train.py
#     runs in it too);
#   - demo-trainer (demo-trainer/target/release/demo-trainer), built in release
#     against that torch's libtorch, with an rpath to it.
# Idempotent: a second run only checks and returns in a few seconds.
#
# Environment: PYTHON (interpreter for the venv, default python3).
set -euo pipefail

ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
VENV="$ROOT/.venv"
# tch 0.26 / torch-sys 0.26 (demo-trainer/Cargo.toml) are built for this
# torch; torch-sys refuses any other version.
TORCH_VERSION="2.13.0"
PYTHON="${PYTHON:-python3}"

say() { echo "setup-demo: $*" >&2; }

# --- system packages, installed only when missing ---------------------------
missing=()
command -v c++ >/dev/null 2>&1 || missing+=(g++)
command -v cc >/dev/null 2>&1 || missing+=(gcc)
command -v make >/dev/null 2>&1 || missing+=(make)
if ! command -v "$PYTHON" >/dev/null 2>&1; then
    missing+=(python3 python3-venv)
    PYTHON=python3
elif [ ! -x "$VENV/bin/python" ] && ! "$PYTHON" -c 'import venv, ensurepip' >/dev/null 2>&1; then
    missing+=(python3-venv)
fi
if [ ${#missing[@]} -gt 0 ]; then
    say "installing ${missing[*]}"
    SUDO=""
    [ "$(id -u)" -eq 0 ] || SUDO="sudo"
    $SUDO apt-get update
    DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y --no-install-recommends build-essential "${missing[@]}"
fi
command -v cargo >/dev/null 2>&1 || { say "cargo is not on PATH (install Rust with rustup)"; exit 1; }

# --- the venv ----------------------------------------------------------------
if [ -x "$VENV/bin/python" ] && ! "$VENV/bin/python" -c 'import sys' >/dev/null 2>&1; then
    say "$VENV is broken (its interpreter does not run); recreating it"
    rm -rf "$VENV"
fi
if [ ! -x "$VENV/bin/python" ]; then
    say "creating $VENV with $("$PYTHON" --version 2>&1)"
    "$PYTHON" -m venv "$VENV"
fi
VPY="$VENV/bin/python"

# matplotlib: a test plots figures as training jobs do.
have_torch() {
    "$VPY" - "$TORCH_VERSION" <<'PY' >/dev/null 2>&1
import sys
import torch, numpy, matplotlib  # noqa: F401
sys.exit(torch.__version__.split("+")[0] != sys.argv[1])
PY
}
if ! have_torch; then
    say "installing torch==$TORCH_VERSION, numpy and matplotlib into $VENV (a large download, once)"
    "$VPY" -m pip install --quiet --disable-pip-version-check "torch==$TORCH_VERSION" numpy matplotlib
    have_torch || { say "torch $TORCH_VERSION, numpy or matplotlib does not import in $VENV"; exit 1; }
fi

# --- demo-trainer --------------------------------------------------------------
# torch-sys finds libtorch through the venv's python (LIBTORCH_USE_PYTORCH);
# it runs `python` when VIRTUAL_ENV is set, so the venv comes first on PATH.
say "building demo-trainer (release)"
(
    cd "$ROOT/demo-trainer"
    unset LIBTORCH LIBTORCH_INCLUDE LIBTORCH_LIB LIBTORCH_BYPASS_VERSION_CHECK
    export LIBTORCH_USE_PYTORCH=1 VIRTUAL_ENV="$VENV" PATH="$VENV/bin:$PATH"
    cargo build --release --quiet --target-dir "$ROOT/demo-trainer/target"
)
TRAINER="$ROOT/demo-trainer/target/release/demo-trainer"
# Read whole: under pipefail, `ldd | grep -q` fails when grep stops early.
unresolved=$(ldd "$TRAINER" | grep 'not found' || true)
if [ -n "$unresolved" ]; then
    say "demo-trainer has unresolved libraries:"
    echo "$unresolved" >&2
    exit 1
fi
"$TRAINER" --help >/dev/null
say "ready: $TRAINER and $VPY (torch $TORCH_VERSION)"
