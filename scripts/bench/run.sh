#!/usr/bin/env bash
# Overhead benchmark of the leak tracer against heaptrack and memray on its
# workloads (an allocation-heavy C program, a PyTorch CPU training loop with
# DataLoader workers, the same loop without them, and the loop again untraced
# and sampled only for ten rounds, demo-trainer, a long C run for the
# analyzer), interleaved, medians; prints a Markdown table and
# writes it to out/bench/results.md (raw figures in out/bench/results.json).
#
#   scripts/bench/run.sh                      # everything (tens of minutes)
#   scripts/bench/run.sh --quick              # smoke run: tiny sizes, one round
#   scripts/bench/run.sh --workloads alloc,demo --reps 5
#   scripts/bench/run.sh --help               # all options
#
# Installs what is missing first: heaptrack and GNU time (apt), the demo venv
# and demo-trainer (scripts/setup-demo.sh), memray (pip, into .venv), and
# builds the tracer and analyzer (cargo build --release).
set -euo pipefail
ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)"
say() { echo "bench: $*" >&2; }

for a in "$@"; do
    if [[ $a == -h || $a == --help ]]; then exec python3 "$ROOT/scripts/bench/bench.py" --help; fi
done

missing=()
command -v heaptrack >/dev/null 2>&1 || missing+=(heaptrack)
command -v cc >/dev/null 2>&1 || missing+=(gcc)
[ -x /usr/bin/time ] || missing+=(time)
command -v python3 >/dev/null 2>&1 || missing+=(python3)
if [ ${#missing[@]} -gt 0 ]; then
    say "installing ${missing[*]}"
    SUDO=""
    [ "$(id -u)" -eq 0 ] || SUDO="sudo"
    $SUDO apt-get update -qq
    DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -qq --no-install-recommends "${missing[@]}" ||
        say "could not install ${missing[*]}; the configurations that need them are reported as unavailable"
fi

"$ROOT/scripts/setup-demo.sh"
if ! "$ROOT/.venv/bin/python" -c 'import memray' >/dev/null 2>&1; then
    say "installing memray into $ROOT/.venv"
    "$ROOT/.venv/bin/python" -m pip install --quiet --disable-pip-version-check memray ||
        say "could not install memray; its configurations are reported as unavailable"
fi
say "building the tracer and analyzer (release)"
if ! (cd "$ROOT" && cargo build --release --quiet); then
    if [[ -f $ROOT/target/release/libtracer.so && -x $ROOT/target/release/analyzer ]]; then
        say "cargo build --release failed; measuring the existing target/release binaries"
    else
        say "cargo build --release failed and there is nothing built to measure"; exit 1
    fi
fi

mkdir -p "$ROOT/out/bench"
exec python3 "$ROOT/scripts/bench/bench.py" "$@"
