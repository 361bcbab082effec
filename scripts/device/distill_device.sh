#!/usr/bin/env bash
# Runs `omnidraft distill teacher` and `train` on the lent GPU machine (docs/DISTILL.md).
# The GGUFs, the gguf wheel and the texts npz (from `omnidraft distill data`) reach it in parts first:
#   here:  scripts/device/device_xfer.sh pack models <target gguf> <SmolLM2 gguf> .whl/gguf-*.whl
#          scripts/device/device_xfer.sh pack texts .distill/texts.npz
#   there: one call per part, `scripts/device/device_xfer.sh recv models|texts` (docs/DISTILL.md)
# Every step runs under torchrun on $NPROC GPUs of this host (default: all that nvidia-smi -L lists).
#   usage: scripts/device/distill_device.sh prepare                     join the parts, install the wheel
#          scripts/device/distill_device.sh teacher [KEY=VALUE...]      write $W/data.npz
#          scripts/device/distill_device.sh train CHOICE MIN [KEY=VALUE...]
#              train one layer choice for at most MIN minutes; $OUT/<NAME>/ gets the tensors
#              (NAME=... among the KEY=VALUEs is not a config field: it names the run's folder, default CHOICE)
#          scripts/device/distill_device.sh scale CHOICE STEPS [KEY=VALUE...]
#              the same STEPS global steps (4 groups of $MICRO = 16384 padded tokens; N ranks accumulate 4/N
#              each) on N = 1, 2, 4 GPUs, as many as there are; $OUT/scale-N/ gets each history.json
#          scripts/device/distill_device.sh pipeline                    teacher (unless $W/data.npz is there),
#              `train` $CHOICE (default first8) from $INIT (default SmolLM2) on every GPU for at most
#              $TRAIN_MIN minutes (default 4.5), then `scale` for $SCALE_STEPS steps (default 20; 0: none):
#              $OUT/final/ and $OUT/meta.tgz (scale histories, logs, the data's meta); run it with `bg`
#          scripts/device/distill_device.sh bg NAME STEP ARGS...        the same, detached (longer than one call);
#                                                                its $OUT is $W/out-NAME
#          scripts/device/distill_device.sh wait NAME SECONDS [TEXT]    wait for it at most SECONDS (or until its log
#                                                                holds TEXT); its log's tail
#          scripts/device/distill_device.sh stacks                      every rank prints its threads' stacks to its log
#                                                                (wait does it when the log is silent 2 min)
#          scripts/device/distill_device.sh fetch NAME                  copy $W/out-NAME/ to this call's $OUT
set -euo pipefail
W=${W:-/tmp/w}           # work dir: texts, teacher data, runs, logs (prepare puts it in /dev/shm where it fits)
SITE=${SITE:-/tmp/site}  # the wheels installed there, and a stub llama_cpp
export W SITE PYTHONPATH=$SITE:backend:. PYTHONUNBUFFERED=1
export NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1  # no NVLink multicast on the lent (shared) hosts
QWEN=${QWEN:-/tmp/m/qwen2.5-coder-1.5b-instruct-q4_0_pure.gguf} SMOL=${SMOL:-/tmp/m/SmolLM2-135M-Instruct.Q4_1.gguf}
NGPU=$(nvidia-smi -L 2>/dev/null | grep -c '^GPU' || true)
NPROC=${NPROC:-$(( NGPU > 0 ? NGPU : 1 ))}
DEV=${DEV:-cuda}  # cpu: a dry run of the same steps with gloo
MICRO=${MICRO:-16384}  # padded tokens of one batch group: 65,536 on one H100 ran out of memory
case "${1:-}" in prepare | teacher | train | scale | pipeline | bg | wait | fetch | stacks) ;; *) sed -n '2,/^set /p' "$0" | grep '^#' >&2; exit 2 ;; esac
distill() {  # distill N STEP ARGS...: one `distill` step on N ranks of this host
  local n=$1
  shift
  python3 -m torch.distributed.run --standalone --nproc_per_node="$n" -m omnidraft.distill "$@" 2>&1 |
    grep --line-buffered -v '^load'
}
if [ "$1" = prepare ]; then
  # the teacher writes and merges gigabytes of shards: in RAM where the host has it (a slow disk is the suspect
  # for the minutes a run lost after its top-k pass); 64 GB of /dev/shm leave room for shards + merged data
  if [ "$W" = /tmp/w ] && [ ! -e /tmp/w ] && [ "$(df --output=avail -k /dev/shm 2>/dev/null | tail -n 1)" -gt 64000000 ] 2>/dev/null; then
    mkdir -p /dev/shm/w && ln -s /dev/shm/w /tmp/w && echo "work dir: /dev/shm/w"
  fi
  df -h /tmp /dev/shm | tail -n +1
  bash scripts/device/device_xfer.sh join models /tmp/m
  bash scripts/device/device_xfer.sh join texts "$W"
  python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target "$SITE" \
    /tmp/m/*.whl
  nvidia-smi -L; nproc; python3 -c 'import torch, transformers; print(torch.__version__, transformers.__version__)'
fi
if [ ! -d "$SITE/llama_cpp" ]; then  # gguf_tools.quantize imports llama_cpp; nothing here calls llama.cpp
  mkdir -p "$SITE/llama_cpp"
  printf 'class _D(int):\n    def __call__(self, *a, **k):\n        return _D(0)\n\n\ndef __getattr__(name):\n    return _D(0)\n' > "$SITE/llama_cpp/__init__.py"
fi
case "$1" in
prepare) ;;
teacher)
  shift
  distill "$NPROC" teacher --set texts="$W/texts.npz" target_gguf="$QWEN" out="$W/data.npz" device=$DEV "$@" ;;
pipeline)
  # the drafter first (what ships), then the scaling runs: a failed scaling run must not cost the drafter
  t0=$SECONDS
  [ -f "$W/data.npz" ] || bash "$0" teacher gen_batch=384 batch_tokens=32768
  echo "[pipeline] teacher done at $(( SECONDS - t0 )) s"
  distill "$NPROC" train --set data="$W/data.npz" draft_gguf="${INIT:-$SMOL}" layers="${CHOICE:-first8}" \
    out="$W/final" device=$DEV max_minutes="${TRAIN_MIN:-4.5}" epochs="${EPOCHS:-1.0}" eval_every=200 \
    batch_tokens="$MICRO" accum=$(( ${WORLD_ACCUM:-4} / NPROC ))
  echo "[pipeline] train done at $(( SECONDS - t0 )) s"
  mkdir -p "$OUT/final" "$W/meta"
  cp "$W/final/${CHOICE:-first8}"/* "$OUT/final/"
  if [ "${SCALE_STEPS:-20}" -gt 0 ]; then  # SCALE_STEPS=0: no scaling runs (their table is in docs/DISTILL.md)
    bash "$0" scale "${CHOICE:-first8}" "${SCALE_STEPS:-20}" draft_gguf="${INIT:-$SMOL}" eval_every=1000 ||
      echo "[pipeline] scaling runs failed"
  fi
  cp -r "$OUT"/scale-* "$W/meta"/ 2>/dev/null || true
  python3 -c 'import numpy as np, sys; z = np.load(sys.argv[1]); open(sys.argv[2], "wb").write(bytes(z["meta"]))' \
    "$W/data.npz" "$W/meta"/data-meta.json
  cp "$W"/*.log "$W/meta"/ 2>/dev/null || true
  tar czf "$OUT/meta.tgz" -C "$W" meta
  echo "[pipeline] all done at $(( SECONDS - t0 )) s" ;;
bg)
  name=$2
  shift 2
  mkdir -p "$W"
  # from a private copy of the code: every later call replaces the work tree, and a rank importing a module
  # while that happens fails (a device run lost its teacher to "No module named gguf_tools.convert")
  rm -rf "$W/code-$name" && mkdir -p "$W/code-$name" && cp -r backend gguf_tools scripts "$W/code-$name/"
  cd "$W/code-$name"
  OUT="$W/out-$name" setsid nohup bash scripts/device/distill_device.sh "$@" > "$W/$name.log" 2>&1 < /dev/null &
  echo $! > "$W/$name.pid"
  echo "started $name (pid $(cat "$W/$name.pid"))" ;;
wait)
  pid=$(cat "$W/$2.pid")
  end=$(( SECONDS + $3 ))
  until ! kill -0 "$pid" 2>/dev/null || [ $SECONDS -ge "$end" ] ||
    { [ -n "${4:-}" ] && grep -qF -- "$4" "$W/$2.log"; }; do sleep "${POLL:-5}"; done  # POLL=0.2: the test's dry run
  kill -0 "$pid" 2>/dev/null && echo "$2: still running" || echo "$2: finished"
  # a log silent for 2 minutes: every rank prints its stacks (faulthandler on SIGUSR1) before the tail
  if kill -0 "$pid" 2>/dev/null && [ $(( $(date +%s) - $(stat -c %Y "$W/$2.log") )) -gt 120 ]; then
    bash "$0" stacks && sleep 2
  fi
  tr '\r' '\n' < "$W/$2.log" | grep -v '^ *$' | tail -n 40 ;;
stacks)
  # the ranks only: torchrun's own process has no handler and SIGUSR1 would end it
  for p in $(pgrep -f 'omnidraft.distill'); do
    tr '\0' ' ' < "/proc/$p/cmdline" | grep -q 'torch.distributed.run' || kill -USR1 "$p"
  done ;;
fetch)
  cp -r "$W/out-$2/." "$OUT/" && ls -R "$OUT" ;;
train)
  choice=$2 minutes=$3 name=$2
  shift 3
  sets=()
  for kv in "$@"; do case "$kv" in NAME=*) name=${kv#NAME=} ;; *) sets+=("$kv") ;; esac; done
  distill "$NPROC" train --set data="$W/data.npz" draft_gguf=$SMOL layers="$choice" out="$W/$name" \
    device=$DEV max_minutes="$minutes" "${sets[@]}"
  mkdir -p "$OUT/$name" && cp "$W/$name/$choice"/* "$OUT/$name/" ;;
scale)
  # the same global batch at every N: $MICRO padded tokens a group, WORLD_ACCUM (4) groups a step, N ranks
  # accumulating WORLD_ACCUM / N each, so every N trains on the same groups in the same order
  choice=$2 steps=$3
  shift 3
  for n in 1 2 4; do
    [ "$n" -le "$NPROC" ] || break
    distill "$n" train --set data="$W/data.npz" draft_gguf=$SMOL layers="$choice" out="$W/scale-$n" \
      device=$DEV max_steps="$steps" batch_tokens="$MICRO" accum=$(( ${WORLD_ACCUM:-4} / n )) "$@"
    mkdir -p "$OUT/scale-$n" && cp "$W/scale-$n/$choice/history.json" "$OUT/scale-$n/"
  done ;;
esac
