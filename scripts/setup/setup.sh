#!/usr/bin/env bash
# Create or reuse the virtual environment and install everything omnidraft needs.
# Idempotent: a stamp of the dependency files skips the work when nothing changed.
set -euo pipefail
cd "$(dirname "$0")/../.."
VENV="${OMNIDRAFT_VENV:-.venv}"
PY="${PYTHON:-python3}"

if [ ! -x "$VENV/bin/python" ]; then
  echo "[setup] creating virtual environment in $VENV"
  "$PY" -m venv "$VENV"
fi
STAMP="$VENV/.omnidraft-setup"
# The CPU's feature flags are part of the stamp: a venv carried to another CPU (an AMD build on an AMX
# Xeon, say) runs setup again, so the build probe below checks the build before any generation does.
WANT="$( (cat pyproject.toml scripts/setup/constraints.txt scripts/setup/setup.sh backend/omnidraft/llama/build.py \
          backend/omnidraft/llama/buildprobe.py backend/omnidraft/llama/patch/*; echo "${OMNIDRAFT_SBQ4:-}"; \
          grep -m1 '^flags' /proc/cpuinfo 2>/dev/null) | sha256sum | cut -d' ' -f1)"
if [ -f "$STAMP" ] && [ "$(cat "$STAMP")" = "$WANT" ]; then
  echo "[setup] environment up to date ($VENV)"
  exit 0
fi
"$VENV/bin/python" -m pip install -q --upgrade pip wheel setuptools

# llama-cpp-python compiles llama.cpp (about 3-5 min on 2 cores without the multimodal part).
# backend/omnidraft/llama/build.py names the flags: no llamafile kernels (they round batched products
# differently from one-token decoding, which would break exact output) and, on x86, each instruction
# set this CPU advertises named one by one instead of -march=native, AMX off (its tiles trap with
# SIGILL where the OS does not grant them to worker threads).  Set CMAKE_ARGS to build your own way.
# On x86 the sources carry omnidraft's small-batch Q4_0 kernel (backend/omnidraft/llama/patch/):
# verification batches of up to 8 tokens for little more than one decode.  OMNIDRAFT_SBQ4=0: without it.
# --no-cache-dir: pip's wheel cache ignores CMAKE_ARGS and could hand back a build with other flags.
BUILD_DIR="$VENV/src"
build_llama() {  # $1 = native | safe | baseline, $2 = patched | upstream
  local args="${CMAKE_ARGS:-$("$VENV/bin/python" backend/omnidraft/llama/build.py cmake-args "$1")}"
  local src="llama-cpp-python==0.3.36"
  if [ "$2" = patched ]; then
    src="$("$VENV/bin/python" backend/omnidraft/llama/build.py source "$BUILD_DIR")" || {
      echo "[setup] the kernel patch could not be applied: building the upstream sources" >&2
      src="llama-cpp-python==0.3.36"; }
  fi
  echo "[setup] building llama-cpp-python 0.3.36 ($1 tier, $2 sources, about 4 minutes): $args"
  CMAKE_ARGS="$args" "$VENV/bin/python" -m pip install -q --no-cache-dir --force-reinstall --no-deps "$src"
}
KERNEL=upstream
if "$VENV/bin/python" backend/omnidraft/llama/build.py wants-kernel; then
  KERNEL=patched
fi
if ! "$VENV/bin/python" backend/omnidraft/llama/build.py check 2>/dev/null; then
  build_llama native "$KERNEL"
fi
"$VENV/bin/python" -m pip install -q llama-cpp-python==0.3.36  # its pure-Python dependencies
# Ask for torch by exact version first: a bare `torch` would pull a multi-GB CUDA build.
"$VENV/bin/python" -m pip install -q torch==2.13.0
"$VENV/bin/python" -m pip install -q -c scripts/setup/constraints.txt -e ".[train,test,bench]"

# Check what was built before declaring success: a tiny model decoded in a child process, both
# engine modes, batches of 1..8, against a numpy reference.  On a crash or wrong numbers, rebuild
# with fewer instruction sets, and stop with one clear line if nothing works.
probe() { "$VENV/bin/python" -m omnidraft.llama.buildprobe; }
if ! probe; then
  # first the same instruction sets without the kernel patch, then fewer instruction sets
  for tier in native:upstream safe:upstream baseline:upstream; do
    [ "$tier" = native:upstream ] && [ "$KERNEL" = upstream ] && continue
    echo "[setup] rebuilding llama-cpp-python: ${tier%%:*} instruction sets, ${tier##*:} sources"
    CMAKE_ARGS="" build_llama "${tier%%:*}" "${tier##*:}"
    if probe; then break; fi
    if [ "$tier" = baseline:upstream ]; then
      echo "[setup] FAILED: no llama.cpp build passes the check on this machine; see 'omnidraft doctor'" >&2
      exit 1
    fi
  done
fi
echo "$WANT" > "$STAMP"
echo "[setup] done"
