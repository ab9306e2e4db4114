#!/usr/bin/env bash
# Stack-capture overhead: alloc_heavy untraced, under libtracer.so and under
# heaptrack, interleaved, REPS times each; prints medians and ratios.
#
#   scripts/bench/unwind.sh [THREADS PAIRS DEPTH]   (default: 2 500000 20)
#   REPS=5 TRACER_LIB=/path/to/libtracer.so scripts/bench/unwind.sh
set -euo pipefail
root=$(cd "$(dirname "$0")/../.." && pwd)
args=("${1:-2}" "${2:-500000}" "${3:-20}")
reps=${REPS:-3}
lib=${TRACER_LIB:-$root/target/release/libtracer.so}
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
cc -O2 -g -fomit-frame-pointer -pthread -o "$work/alloc_heavy" "$root/scripts/bench/alloc_heavy.c"
[[ -f $lib ]] || { echo "missing $lib: run cargo build --release -p tracer" >&2; exit 1; }
have_heaptrack=$(command -v heaptrack >/dev/null && echo 1 || echo 0)

seconds() { # command... -> elapsed wall seconds
    local start end
    start=$(date +%s.%N)
    "$@" >/dev/null 2>&1
    end=$(date +%s.%N)
    echo "$end - $start" | bc -l
}
median() { sort -g | awk '{a[NR]=$1} END {print (NR%2) ? a[(NR+1)/2] : (a[NR/2]+a[NR/2+1])/2}'; }

: >"$work/untraced"; : >"$work/tracer"; : >"$work/heaptrack"
for ((i = 1; i <= reps; i++)); do
    seconds "$work/alloc_heavy" "${args[@]}" >>"$work/untraced"
    seconds env LD_PRELOAD="$lib" TRACER_OUTPUT="$work/trace.bin" "$work/alloc_heavy" "${args[@]}" >>"$work/tracer"
    if [[ $have_heaptrack == 1 ]]; then
        seconds heaptrack -o "$work/heaptrack.out" "$work/alloc_heavy" "${args[@]}" >>"$work/heaptrack"
        rm -f "$work"/heaptrack.out*
    fi
    rm -f "$work"/trace.bin*
done
u=$(median <"$work/untraced"); t=$(median <"$work/tracer")
printf 'alloc_heavy %s, %d reps, medians:\n' "${args[*]}" "$reps"
printf '  untraced   %7.3f s\n' "$u"
printf '  tracer     %7.3f s  %6.1fx untraced\n' "$t" "$(echo "$t / $u" | bc -l)"
if [[ $have_heaptrack == 1 ]]; then
    h=$(median <"$work/heaptrack")
    printf '  heaptrack  %7.3f s  %6.1fx untraced\n' "$h" "$(echo "$h / $u" | bc -l)"
    printf '  tracer ratio / heaptrack ratio: %.2f (extra time: %.2f)\n' "$(echo "$t / $h" | bc -l)" "$(echo "($t - $u) / ($h - $u)" | bc -l)"
fi
