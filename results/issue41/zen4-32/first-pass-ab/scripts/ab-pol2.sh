#!/bin/bash
# the first-pass pricing A/B: before = HEAD c6877f1's backend (a copy on PYTHONPATH), after = the working tree
cd /work/main
run() { # tag pythonpath draft set k
  local out=/tmp/pol2/$1
  mkdir -p $out
  PYTHONPATH=$2 .venv/bin/python -m omnidraft.apps.cli bench run --targets qwen2.5-coder-1.5b ${3:+--draft $3} --sets $4 --n 6 --max-tokens 64 --methods target,hybrid --ks $5 --no-gamma --no-progress --no-plots --out $out > $out.log 2>&1
}
A=/tmp/i43/d1000/code-long-mb4/after-1000-v0031.gguf
for r in 1 2; do
  if [ $r = 1 ]; then o="before after"; else o="after before"; fi
  for w in $o; do
    pp=/work/main/backend; [ $w = before ] && pp=/tmp/before-backend
    run r$r-d8-humaneval-$w $pp "" humaneval 4
    run r$r-d8-chat-$w $pp "" chat-fresh 4
    run r$r-adapted-humaneval-$w $pp $A humaneval 3
  done
done
echo done > /tmp/pol2/DONE
