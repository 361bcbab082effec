#!/data/data/com.termux/files/usr/bin/bash
# Install the omnidraft backend on an Android phone under Termux (ARM64), then pull the model pair.
#
#   pkg install -y git && git clone <omnidraft repo> ~/omnidraft
#   bash ~/omnidraft/android_demo/termux/setup.sh            # default pair, ~600 MB download
#   OMNIDRAFT_TARGET=qwen2.5-coder-1.5b bash .../setup.sh     # bigger target (~1.1 GB, 6 GB+ phones)
#
# Idempotent: re-running skips what is already done.  Takes 10-20 minutes the first time
# (llama.cpp compiles on the phone).  See android_demo/termux/README.md.
set -euo pipefail

REPO="$(cd "$(dirname "$0")/../.." && pwd)"
VENV="${OMNIDRAFT_VENV:-$REPO/.venv}"
TARGET="${OMNIDRAFT_TARGET:-qwen2.5-coder-0.5b}"
DRAFT="${OMNIDRAFT_DRAFT:-smollm2-135m-d8-qwen}"  # ships in models/: pull only verifies it
# The project requires GGML_LLAMAFILE=OFF: llamafile's kernels round differently for batches than
# for single tokens, which would break exact (bit-identical) verification.  LLAVA is not needed.
LLAMA_CMAKE_ARGS="${CMAKE_ARGS:--DLLAVA_BUILD=OFF -DGGML_LLAMAFILE=OFF}"
# Compile with the big cores' worth of jobs but not more: the phone throttles and swaps otherwise.
JOBS="${OMNIDRAFT_BUILD_JOBS:-4}"

if [ -z "${PREFIX:-}" ] || [ ! -d "${PREFIX}" ] || ! command -v pkg >/dev/null; then
  echo "setup.sh: this script is for Termux on Android (PREFIX/pkg not found)." >&2
  echo "On a laptop use scripts/setup/setup.sh instead." >&2
  exit 2
fi

echo "[termux] system packages"
pkg update -y
# python-numpy from Termux's repository: building numpy with pip on a phone takes ~30 minutes.
pkg install -y python python-pip python-numpy git clang cmake ninja make binutils libandroid-spawn

if [ ! -x "$VENV/bin/python" ]; then
  echo "[termux] virtual environment $VENV (with Termux's numpy)"
  python -m venv --system-site-packages "$VENV"
fi
PY="$VENV/bin/python"

LLAMA_OK="$REPO/backend/omnidraft/llama/build.py"  # exit 0: pinned version, no llamafile kernels
if ! "$PY" "$LLAMA_OK" 2>/dev/null; then
  echo "[termux] building llama-cpp-python 0.3.36 with: $LLAMA_CMAKE_ARGS"
  CMAKE_ARGS="$LLAMA_CMAKE_ARGS" CMAKE_BUILD_PARALLEL_LEVEL="$JOBS" \
    "$PY" -m pip install --no-cache-dir --force-reinstall --no-deps llama-cpp-python==0.3.36
  "$PY" "$LLAMA_OK" || { echo "llama.cpp was built with llamafile kernels: exactness would break" >&2; exit 1; }
fi

echo "[termux] omnidraft (no training extras: torch does not run under Termux)"
"$PY" -m pip install -q -c "$REPO/scripts/setup/constraints.txt" -e "$REPO" \
  || "$PY" -m pip install -q -e "$REPO"

echo "[termux] checking the llama.cpp build (tiny model, child process)"
"$PY" -m omnidraft.llama.buildprobe || { echo "see: $VENV/bin/omnidraft doctor" >&2; exit 1; }

echo "[termux] models: $DRAFT (drafter) + $TARGET (target)"
"$VENV/bin/omnidraft" models pull "$DRAFT" "$TARGET"

echo "[termux] done.  Start the server with:  bash $REPO/android_demo/termux/run.sh"
