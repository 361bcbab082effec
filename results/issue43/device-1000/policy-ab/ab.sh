#!/bin/bash
cd /work/main
run() { # tag pythonpath draft set
  local out=/tmp/pol/$1
  mkdir -p $out
  PYTHONPATH=$2 .venv/bin/python -m omnidraft.apps.cli bench run --targets qwen2.5-coder-1.5b ${3:+--draft $3} --sets $4 --n 6 --max-tokens 64 --methods target,hybrid --ks 3 --no-gamma --no-progress --no-plots --out $out > $out.log 2>&1
}
A=/tmp/i43/d1000/code-long-mb4/after-1000-v0031.gguf
for r in 1 2; do
  if [ $r = 1 ]; then o="before after"; else o="after before"; fi
  for w in $o; do
    pp=/work/main/backend; [ $w = before ] && pp=/tmp/before-backend
    run r$r-adapted-$w $pp $A humaneval
  done
done
for r in 1 2; do
  if [ $r = 1 ]; then o="before after"; else o="after before"; fi
  for w in $o; do
    pp=/work/main/backend; [ $w = before ] && pp=/tmp/before-backend
    run r$r-d8-$w $pp "" humaneval
  done
done
echo done > /tmp/pol/DONE
