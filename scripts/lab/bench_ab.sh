#!/bin/bash
# Alternated A/B rounds of `omnidraft bench run` between two copies of the backend: the policy A/Bs of issues 41
# and 43.  Each round runs every RUN under both versions, before then after in odd rounds when FIRST=before
# (the default), flipped in even rounds, so that a 2-core VM's drift lands on both alike.  Nothing else should
# run meanwhile.  Summarise with scripts/lab/bench_ab_summary.py OUT.
#
#   scripts/lab/bench_ab.sh OUT BEFORE AFTER ROUNDS RUN...
#     OUT      folder for the runs: OUT/r<round>-<NAME>-<before|after>/ (bench run's JSON and table) and .log
#     BEFORE   a backend folder (PYTHONPATH) for "before", e.g. a `git archive` of the last commit's backend/
#     AFTER    the same for "after", e.g. backend (this checkout)
#     ROUNDS   how many rounds
#     RUN      NAME=SET:K[:DRAFT]: NAME as <drafter>-<set> (the summary reads the drafter from it), SET a held-out
#              set, K the fixed draft length run beside the default, DRAFT a drafter name or .gguf (empty: default)
#   environment: FIRST=after (round 1's order), TARGET (qwen2.5-coder-1.5b), N (6 prompts), MAX_TOKENS (64),
#                EXTRA (more bench run flags, e.g. "--temperature 0.8 --top-k 40 --top-p 0.9"),
#                DRY=1 (print the commands, run nothing)
#
#   scripts/lab/bench_ab.sh /tmp/ab /tmp/head/backend backend 2 d8-humaneval=humaneval:4 d8-chat=chat-fresh:4
set -euo pipefail
[ $# -ge 5 ] || { sed -n '2,18p' "$0"; exit 2; }
OUT=$1 BEFORE=$2 AFTER=$3 ROUNDS=$4
shift 4
cd "$(dirname "$0")/../.."
PY=${PYTHON:-.venv/bin/python}

run() { # name version pythonpath set k draft
  local out=$OUT/$1-$2
  local cmd=(env PYTHONPATH="$3" "$PY" -m omnidraft.apps.cli bench run --targets "${TARGET:-qwen2.5-coder-1.5b}"
             ${6:+--draft "$6"} --sets "$4" --n "${N:-6}" --max-tokens "${MAX_TOKENS:-64}" --methods target,hybrid
             --ks "$5" --no-gamma --no-progress --no-plots --out "$out" ${EXTRA:-})
  if [ -n "${DRY:-}" ]; then echo "${cmd[*]}"; return; fi
  mkdir -p "$out"
  "${cmd[@]}" > "$out.log" 2>&1
}

for r in $(seq 1 "$ROUNDS"); do
  order="before after"
  if [ "${FIRST:-before}" = after ]; then order="after before"; fi
  if [ $((r % 2)) = 0 ]; then order=$(echo "$order" | awk '{print $2, $1}'); fi
  for spec in "$@"; do
    name=${spec%%=*} rest=${spec#*=}
    IFS=: read -r set k draft <<< "$rest"
    for v in $order; do
      pp=$AFTER; [ "$v" = before ] && pp=$BEFORE
      run "r$r-$name" "$v" "$pp" "$set" "$k" "${draft:-}"
    done
  done
done
[ -n "${DRY:-}" ] || echo done > "$OUT/DONE"
