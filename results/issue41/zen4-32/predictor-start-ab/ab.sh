#!/bin/bash
# the acceptance predictor's start: w[logit_p] 1.0 (before, 86c1915) against 4.0 (after: sigmoid(logit p) = p)
cd /work/main
run() { local out=/tmp/pol6/$1; mkdir -p $out
  PYTHONPATH=$2 .venv/bin/python -m omnidraft.apps.cli bench run --targets qwen2.5-coder-1.5b ${3:+--draft $3} --sets $4 --n 6 --max-tokens 64 --methods target,hybrid --ks $5 --no-gamma --no-progress --no-plots --out $out > $out.log 2>&1; }
for r in 1 2; do
  if [ $r = 1 ]; then o="before after"; else o="after before"; fi
  for w in $o; do
    pp=/work/main/backend; [ $w = after ] && pp=/tmp/variant-backend
    run r$r-d8-humaneval-$w $pp "" humaneval 4
    run r$r-d8-chat-$w $pp "" chat-fresh 4
  done
done
echo done > /tmp/pol6/DONE
