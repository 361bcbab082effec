#!/usr/bin/env bash
# T(n) of the small-batch kernel against ggml's own kernels on the lent machine's many-core CPU (issue 24).
#
#   scripts/device/device_passes.sh prepare    # here: .devcarry/ = this venv's patched llama_cpp build, the gguf
#                                       #       wheel for the device's Python, a skeleton of the 1.5B model
#   scripts/device/device_passes.sh run [THREADS]   # there: synthesize the 1.5B shapes in pure Q4_0 (random
#                                       #       weights: speed does not depend on their values), then
#                                       #       `omnidraft bench passes` at 4, 8, 16 threads
# Through the device tool, from the repository root:
#   run(command="bash scripts/device/device_passes.sh run", carry=[".devcarry"])
# The JSON and markdown land in $OUT; copy them to results/device/.
set -euo pipefail
cd "$(dirname "$0")/../.."
ROOT=$(pwd)
CARRY="$ROOT/.devcarry"
THREADS="${2:-4,8,16}"
OUT="${OUT:-/tmp/device-out}"

prepare() {
  local py="${PYTHON:-.venv/bin/python}" site
  MODELS=qwen2.5-coder-1.5b bash scripts/device/device_costmodel.sh prepare >/dev/null
  site=$("$py" -c 'import llama_cpp, os; print(os.path.dirname(os.path.dirname(llama_cpp.__file__)))')
  "$py" -c 'from omnidraft.llama import build as b; import sys; sys.exit(0 if b.sbq4_variant() else 1)' \
    || { echo "this venv's llama.cpp has no small-batch kernel: run make setup first" >&2; exit 1; }
  tar czf "$CARRY/llama-sbq4.tgz" -C "$site" llama_cpp
  du -sh "$CARRY"
}

device_run() {
  mkdir -p "$OUT" /tmp/llama-pre /tmp/synthetic
  echo "[device] $(nproc) cores; $(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2)"
  python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site \
    "$CARRY"/whl/*.whl
  tar xzf "$CARRY/llama-sbq4.tgz" -C /tmp/llama-pre
  for f in /tmp/llama-pre/llama_cpp/lib/lib*.so; do [ -e "$f.0" ] || ln -s "$(basename "$f")" "$f.0"; done
  export PYTHONPATH="/tmp/llama-pre:/tmp/site:$ROOT/backend:$ROOT" PYTHONUNBUFFERED=1
  local model=/tmp/synthetic/qwen2.5-coder-1.5b-q4_0_pure-synthetic.gguf
  [ -f "$model" ] || python3 -c 'import omnidraft, sys
from gguf_tools import synth
synth.build(sys.argv[1], sys.argv[2], seed=0, qtype="q4_0_pure")' "$CARRY/skeletons/qwen2.5-coder-1.5b.gguf.gz" "$model"
  python3 -m omnidraft.llama.buildprobe --threads 8
  python3 -m omnidraft.bench.passes --targets "$model" --threads-list "$THREADS" --kernels sbq4,ggml \
    --rounds 3 --out "$OUT" 2>&1 | tee "$OUT/run-passes.log"
}

case "${1:-}" in
  prepare) prepare ;;
  run) device_run ;;
  *) echo "usage: $0 prepare|run [threads]" >&2; exit 2 ;;
esac
