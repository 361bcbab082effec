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
# backend/omnidraft/llama/build.py names the flags (its native tier: -DGGML_NATIVE=ON, ggml then probes the
# phone's dotprod / i8mm / SVE with Termux's clang) and prepares the patched sources: the small-batch
# kernels' aarch64 variants (sbq4.cpp, sbk.cpp) hooked into ggml-cpu.  OMNIDRAFT_SBQ4=0: upstream sources.
BUILD_PY="$REPO/backend/omnidraft/llama/build.py"
UPSTREAM="llama-cpp-python==0.3.36"
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

LLAMA_CMAKE_ARGS="${CMAKE_ARGS:-$("$PY" "$BUILD_PY" cmake-args native)}"
SOURCES_STAMP="$VENV/.llama-sources"  # "upstream" once the patched build failed its check here
build_llama() {  # $1 = patched | upstream
  local src="$UPSTREAM"
  if [ "$1" = patched ]; then
    src="$("$PY" "$BUILD_PY" source "$VENV/src")" || {
      echo "[termux] the kernel patch could not be applied: building the upstream sources" >&2; src="$UPSTREAM"; }
  fi
  echo "[termux] building llama-cpp-python 0.3.36 ($1 sources) with: $LLAMA_CMAKE_ARGS"
  CMAKE_ARGS="$LLAMA_CMAKE_ARGS" CMAKE_BUILD_PARALLEL_LEVEL="$JOBS" \
    "$PY" -m pip install --no-cache-dir --force-reinstall --no-deps "$src"
}
KERNEL=upstream
if [ "$(cat "$SOURCES_STAMP" 2>/dev/null)" != upstream ] && "$PY" "$BUILD_PY" wants-kernel; then
  KERNEL=patched
fi
# check: exit 0 if the installed build is the pinned version without llamafile kernels (and, where the
# kernels are wanted, carries them)
if ! OMNIDRAFT_SBQ4="$([ "$KERNEL" = patched ] && echo 1 || echo 0)" "$PY" "$BUILD_PY" check 2>/dev/null; then
  build_llama "$KERNEL"
fi

echo "[termux] omnidraft (no training extras: torch does not run under Termux)"
"$PY" -m pip install -q -c "$REPO/scripts/setup/constraints.txt" -e "$REPO" \
  || "$PY" -m pip install -q -e "$REPO"

echo "[termux] checking the llama.cpp build (tiny model, child process; with the kernels: batches of 1..8"
echo "         rows bit-identical to one-row decoding)"
if ! "$PY" -m omnidraft.llama.buildprobe; then
  [ "$KERNEL" = patched ] || { echo "see: $VENV/bin/omnidraft doctor" >&2; exit 1; }
  echo "[termux] the patched build failed its check: rebuilding the upstream sources" >&2
  echo upstream > "$SOURCES_STAMP"
  KERNEL=upstream
  build_llama upstream
  "$PY" -m omnidraft.llama.buildprobe || { echo "see: $VENV/bin/omnidraft doctor" >&2; exit 1; }
fi
"$VENV/bin/omnidraft" doctor 2>/dev/null | grep -E "small-batch" || true

echo "[termux] models: $DRAFT (drafter) + $TARGET (target)"
"$VENV/bin/omnidraft" models pull "$DRAFT" "$TARGET"

echo "[termux] done.  Start the server with:  bash $REPO/android_demo/termux/run.sh"
