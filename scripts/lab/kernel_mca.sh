#!/usr/bin/env bash
# A kernel's instruction bound without hardware counters: compiles scripts/lab/x8_kernel_bench.cpp with one kernel
# source, takes each group<N> (one block of 8 weight rows against N activation rows) from the binary, and prints
# its instructions, its stack operands (spills and reloads) and llvm-mca's cycles a block for a CPU model.
# Branches and prefetches are dropped, so a group's body counts as one straight block; memory is not modelled.
#
#   scripts/lab/kernel_mca.sh Q6 backend/omnidraft/llama/patch/sbq6x8.cpp            # AVX2, znver1
#   scripts/lab/kernel_mca.sh Q6 old.cpp znver3 "-mavx2 -mfma -mf16c"                 # another model or tier
#   (kernel: Q6 for sbq6x8.cpp, Q4K for sbkx8.cpp)
#
# Written for issue 41 on a 2-core Zen 1 VM whose pace changed by up to 1.7x within minutes: the cycles here do not.
set -euo pipefail
kind=${1:?Q6 or Q4K}; src=${2:?kernel source}; cpu=${3:-znver1}; flags=${4:-"-mavx2 -mfma -mf16c"}
root=$(cd "$(dirname "$0")/../.." && pwd)
tmp=$(mktemp -d); trap 'rm -rf "$tmp"' EXIT
def=-DSBK_STANDALONE; [ "$kind" = Q6 ] && def="$def -DQ6"
# shellcheck disable=SC2086
g++ -O3 -std=c++17 -pthread $def $flags -I"$root/backend/omnidraft/llama/patch" \
    "$root/scripts/lab/x8_kernel_bench.cpp" "$src" -o "$tmp/bench"
objdump -d --no-show-raw-insn -C "$tmp/bench" > "$tmp/all.s"
printf '%-4s %12s %15s %16s\n' rows instructions stack-operands "cycles a block"
for n in 1 2 3 4 5 6 7 8; do
    awk "/group<$n>\\(/,/^\$/" "$tmp/all.s" | grep '^ ' | cut -f2- | sed 's/#.*//' |
        grep -v -E '^\s*(j[a-z]+|ret|push|pop|call|nop|prefetch|leave)' > "$tmp/g$n.s" || true
    [ -s "$tmp/g$n.s" ] || continue
    cycles=$(llvm-mca -mcpu="$cpu" -iterations=100 "$tmp/g$n.s" 2>/dev/null | awk '/Total Cycles/{print $3}')
    printf '%-4s %12s %15s %16.0f\n' "$n" "$(wc -l < "$tmp/g$n.s")" "$(grep -c 'rsp' "$tmp/g$n.s")" \
        "$(echo "$cycles / 100" | bc -l)"
done
