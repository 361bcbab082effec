#!/usr/bin/env bash
# Runs `omnidraft distill teacher` and `train` on the lent GPU machine (docs/DISTILL.md).
# The two GGUFs reach it in <= 57 MiB parts (.distill/xfer/partNN, copied to /tmp/m by earlier calls);
# .distill/texts.npz (from `omnidraft distill data`) and the gguf wheel (.whl) travel with this call.
#   usage: scripts/distill_device.sh teacher            assemble the GGUFs, write /tmp/w/data.npz
#          scripts/distill_device.sh train CHOICE MIN   train one layer choice for at most MIN minutes
set -euo pipefail
export PYTHONPATH=/tmp/site:backend:. PYTHONUNBUFFERED=1
QWEN=/tmp/m/qwen.gguf SMOL=/tmp/m/smol.gguf
if [ ! -d /tmp/site/gguf ]; then
  python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site .whl/*.whl
fi
if [ ! -d /tmp/site/llama_cpp ]; then  # gguf_tools imports the engine module; nothing here calls llama.cpp
  mkdir -p /tmp/site/llama_cpp
  printf 'class _D(int):\n    def __call__(self, *a, **k):\n        return _D(0)\n\n\ndef __getattr__(name):\n    return _D(0)\n' > /tmp/site/llama_cpp/__init__.py
fi
case "$1" in
teacher)
  if [ -f .distill/xfer/part09 ]; then cp .distill/xfer/part09 /tmp/m/; fi
  cat /tmp/m/part0? > /tmp/m/all
  head -c 491400064 /tmp/m/all > $QWEN
  tail -c 98362432 /tmp/m/all > $SMOL
  sha256sum $QWEN $SMOL
  mkdir -p /tmp/w && cp .distill/texts.npz /tmp/w/
  python3 -m omnidraft.trainer.distill teacher --set texts=/tmp/w/texts.npz target_gguf=$QWEN \
    out=/tmp/w/data.npz device=cuda 2>&1 | grep -v '^load' ;;
train)
  python3 -m omnidraft.trainer.distill train --set data=/tmp/w/data.npz draft_gguf=$SMOL layers=$2 \
    out=/tmp/w/trained device=cuda max_minutes=$3 2>&1 | grep -v '^load'
  mkdir -p "$OUT/$2" && cp /tmp/w/trained/$2/* "$OUT/$2/" ;;
esac
