#!/usr/bin/env bash
# Runs `omnidraft distill teacher` and `train` on the lent GPU machine (docs/DISTILL.md).
# The two GGUFs reach it in parts (.distill/xfer/partNN, copied to /tmp/m by earlier calls, each small
# enough to travel beside the work tree); the texts npz (from `omnidraft distill data`, $TEXTS, default
# .distill/texts.npz) and the gguf wheel (.whl) travel with the teacher call.
#   usage: scripts/distill_device.sh teacher [KEY=VALUE...]      assemble the GGUFs, write /tmp/w/data.npz
#          scripts/distill_device.sh train CHOICE MIN [KEY=VALUE...]
#              train one layer choice for at most MIN minutes; $OUT/<CHOICE>/ gets the tensors
#              (NAME=... among the KEY=VALUEs is not a config field: it names the run's folder instead)
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
  shift
  for f in .distill/xfer/part*; do [ -f "$f" ] && cp "$f" /tmp/m/; done
  cat /tmp/m/part* > /tmp/m/all
  head -c 491400064 /tmp/m/all > $QWEN
  tail -c 98362432 /tmp/m/all > $SMOL
  sha256sum $QWEN $SMOL
  mkdir -p /tmp/w && cp "${TEXTS:-.distill/texts.npz}" /tmp/w/texts.npz
  python3 -m omnidraft.trainer.distill teacher --set texts=/tmp/w/texts.npz target_gguf=$QWEN \
    out=/tmp/w/data.npz device=cuda "$@" 2>&1 | grep -v '^load' ;;
train)
  choice=$2 minutes=$3 name=$2
  shift 3
  sets=()
  for kv in "$@"; do case "$kv" in NAME=*) name=${kv#NAME=} ;; *) sets+=("$kv") ;; esac; done
  python3 -m omnidraft.trainer.distill train --set data=/tmp/w/data.npz draft_gguf=$SMOL layers=$choice \
    out=/tmp/w/$name device=cuda max_minutes=$minutes "${sets[@]}" 2>&1 | grep -v '^load'
  mkdir -p "$OUT/$name" && cp /tmp/w/$name/$choice/* "$OUT/$name/" ;;
esac
