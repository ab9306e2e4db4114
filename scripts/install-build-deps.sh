#!/usr/bin/env bash
# Installs what building and testing the tracer and analyzer need: a C and C++
# compiler and binutils for the test programs, jemalloc and tcmalloc to preload
# beside the tracer, and checks for the CPython
# versions the Python-frame tests run on. Fast when everything is there.
set -euo pipefail

missing=()
command -v cc >/dev/null 2>&1 || missing+=(gcc libc6-dev)
command -v c++ >/dev/null 2>&1 || missing+=(g++)
command -v nm >/dev/null 2>&1 || missing+=(binutils)
# The tests preload jemalloc and tcmalloc beside the tracer. The loader's
# cache is read whole first: under pipefail, `ldconfig -p | grep -q` fails
# when grep stops reading before ldconfig has written everything.
libraries=$(ldconfig -p 2>/dev/null || true)
grep -q 'libjemalloc\.so\.2 ' <<<"$libraries" || missing+=(libjemalloc2)
grep -q 'libtcmalloc_minimal\.so\.4 ' <<<"$libraries" || missing+=(libtcmalloc-minimal4)
command -v cargo >/dev/null 2>&1 || { echo "install-build-deps: cargo is not on PATH; install the Rust toolchain (rustup) first" >&2; exit 1; }
if ((${#missing[@]})); then
    echo "install-build-deps: installing ${missing[*]}"
    apt-get update -qq
    DEBIAN_FRONTEND=noninteractive apt-get install -y -qq "${missing[@]}"
fi

# CPython 3.10 (unsupported: native stacks only), 3.11, 3.12 and 3.13. Debian
# packages what it has (python3.11 on Debian 12); the others come from pyenv.
find_python() {
    local v=$1 var="TRACER_TEST_PYTHON${1/./_}"
    [ -n "${!var:-}" ] && [ -x "${!var}" ] && return 0
    compgen -G "${PYENV_ROOT:-$HOME/.pyenv}/versions/$v.*/bin/python3" >/dev/null && return 0
    command -v "python$v" >/dev/null 2>&1
}
absent=()
for v in 3.10 3.11 3.12 3.13; do
    find_python "$v" && continue
    if apt-cache show "python$v" >/dev/null 2>&1 || { apt-get update -qq && apt-cache show "python$v" >/dev/null 2>&1; }; then
        DEBIAN_FRONTEND=noninteractive apt-get install -y -qq "python$v" && continue
    fi
    absent+=("$v")
done
if ((${#absent[@]})); then
    echo "install-build-deps: CPython ${absent[*]} not found: install them with pyenv (pyenv install ${absent[*]}) or set TRACER_TEST_PYTHON3_X to an interpreter" >&2
    exit 1
fi
