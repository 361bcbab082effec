#!/usr/bin/env bash
# Create or reuse the virtual environment and install everything omnidraft needs.
# Idempotent: a stamp of the dependency files skips the work when nothing changed.
set -euo pipefail
cd "$(dirname "$0")/.."
VENV="${OMNIDRAFT_VENV:-.venv}"
PY="${PYTHON:-python3}"

if [ ! -x "$VENV/bin/python" ]; then
  echo "[setup] creating virtual environment in $VENV"
  "$PY" -m venv "$VENV"
fi
STAMP="$VENV/.omnidraft-setup"
WANT="$(cat pyproject.toml scripts/constraints.txt scripts/setup.sh backend/omnidraft/llama_build.py | sha256sum | cut -d' ' -f1)"
if [ -f "$STAMP" ] && [ "$(cat "$STAMP")" = "$WANT" ]; then
  echo "[setup] environment up to date ($VENV)"
  exit 0
fi
"$VENV/bin/python" -m pip install -q --upgrade pip wheel setuptools

# llama-cpp-python compiles llama.cpp (about 4-5 min on 2 cores without the multimodal part).
# GGML_LLAMAFILE=OFF: llamafile's tinyBLAS kernels take over matrix products from 2 rows up and
# round differently from one-row decoding, which would make speculative output differ from the
# target alone at near-ties.  Without them, small verification batches are bit-identical.
# --no-cache-dir: pip's wheel cache ignores CMAKE_ARGS and could hand back a build with other flags.
if ! "$VENV/bin/python" backend/omnidraft/llama_build.py 2>/dev/null; then
  echo "[setup] building llama-cpp-python 0.3.36 (about 5 minutes the first time)"
  CMAKE_ARGS="${CMAKE_ARGS:--DLLAVA_BUILD=OFF -DGGML_LLAMAFILE=OFF}" \
    "$VENV/bin/python" -m pip install -q --no-cache-dir --force-reinstall --no-deps llama-cpp-python==0.3.36
  "$VENV/bin/python" -m pip install -q llama-cpp-python==0.3.36  # its pure-Python dependencies
fi
# Ask for torch by exact version first: a bare `torch` would pull a multi-GB CUDA build.
"$VENV/bin/python" -m pip install -q torch==2.13.0
"$VENV/bin/python" -m pip install -q -c scripts/constraints.txt -e ".[train,test,bench]"
echo "$WANT" > "$STAMP"
echo "[setup] done"
