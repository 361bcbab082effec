#!/bin/bash
cd /work/main
run() { local out=/tmp/pol4/$1; mkdir -p $out
  PYTHONPATH=$2 .venv/bin/python -m omnidraft.apps.cli bench run --targets qwen2.5-coder-1.5b ${3:+--draft $3} --sets $4 --n 6 --max-tokens 64 --methods target,hybrid --ks $5 --no-gamma --no-progress --no-plots --out $out > $out.log 2>&1; }
A=/tmp/i43/d1000/code-long-mb4/after-1000-v0031.gguf
run r1-adapted-humaneval-after /work/main/backend $A humaneval 3
run r1-adapted-humaneval-before /tmp/before-backend $A humaneval 3
run r2-adapted-humaneval-before /tmp/before-backend $A humaneval 3
run r2-adapted-humaneval-after /work/main/backend $A humaneval 3
echo done > /tmp/pol4/DONE
