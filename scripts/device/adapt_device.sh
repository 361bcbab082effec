#!/usr/bin/env bash
# Issue 43: long `omnidraft adapt` streams on the lent GPU machine, with the product's own loop and records
# (server side generation -> records -> outbox -> `omnidraft trainer serve` -> GGUF export -> check -> hot swap).
# Generation runs fully offloaded on a CUDA build of llama-cpp-python (made there from the trimmed sources), the
# trainer's steps on the GPU (`--trainer-device cuda`); export, check and swap on the CPU as here.
#
#   here:  scripts/device/adapt_device.sh prepare    .devadapt/ (trimmed llama-cpp-python sources, wheels, the
#                                                    scenarios' prompt sets as snapshots: adapt_sets.py) and
#                                                    .devxfer/adapt/ (the 0.5B q4_0_pure + SmolLM2-135M, in parts)
#          scripts/device/device_tree.sh light       the bundled drafter out of the index while parts travel
#   there: run(command="bash scripts/device/adapt_device.sh start", carry=[".devadapt", ".devxfer/adapt/manifest",
#              ".devxfer/adapt/part000"])            the CUDA build starts detached; part 0 kept
#          run(command="bash scripts/device/device_xfer.sh recv adapt", carry=[".devxfer/adapt/partNNN"])  each part
#          run(command="bash scripts/device/adapt_device.sh go RUN...")   waits for the build, joins the models,
#                                                    starts the streams detached, spread over the GPUs
#                                                    (RUN: code | code-dm | chat | code-full | code-lr3e5 |
#                                                    code-ep1 | code-recent256 | code-lora | chat-full |
#                                                    code-r64 | code-lr3e3 | code-long | code-long-lr5e4 |
#                                                    code-long-mb4 | chat-long-mb4 | code-long-mb4-dm;
#                                                    the same two served by the 1.5B Q4_K_M, packed with
#                                                    PACK=unseen-1.5b: code-long-mb4-1.5b | chat-long-mb4-1.5b;
#                                                    parts 2 and 3: repo | language | drift, and with
#                                                    LoRA, 4 a step, the cache: repo-mb4 | language-mb4 |
#                                                    drift-mb4; to 512 without the cache's repeat:
#                                                    repo-512 | language-512; chat to 1,500: chat-xl-mb4; the target
#                                                    switch, packed with PACK=drift-target: drift-target-mb4)
#          run(command="bash scripts/device/adapt_device.sh speed")  (optional, once the parts are in) the trainer's
#                                                    update alone on the GPU, HEAD's against this tree's (.devadapt/speed:
#                                                    records.jsonl and HEAD's backend/, put there by hand)
#          (optional, in the `go` call, before `go`) setsid nohup bash scripts/device/adapt_device.sh guard FIRST SECOND N
#                 EPOCH > /tmp/ad/guard.log 2>&1 < /dev/null &   stops run SECOND (its process group) as soon as run
#                                                    FIRST's pace, from its 100th request on, projects its N requests
#                                                    past EPOCH (date +%s): the first stream keeps its end
#          run(command="bash scripts/device/adapt_device.sh wait SECONDS")  until every stream ends (at most
#                                                    SECONDS); each run's JSON, held-out log and logs into $OUT
#          run(command="bash scripts/device/adapt_device.sh drafters RUN...")  (runs with EXTRA=--keep-drafters) the
#                                                    drafters each point measured, as differences from the
#                                                    control, 4 pieces a call: repeat until "0 left"
#   here:  scripts/device/device_tree.sh restore     (right after the last part: before any commit)
#          python scripts/lab/issue43_report.py DIR  the curves (DIR: one folder per run, the .tgz unpacked)
#
# Measured 2026-11-28 (BENCHMARKS "A drafter that never saw the target"): start + 10 parts 97 s of device time,
# the CUDA build 189 s, the CPU build 42 s; three streams at once advance about 1.8 s a request each (updates of
# 32 records 31-38 s on the shared GPU), so 1,000 requests take about 31 minutes: more than a session's device
# time.  A call that overruns its limit ends the detached runs with it (setsid did not save them): give every
# `wait` a SECONDS well inside the call's timeout_s, and fetch before the budget ends.
# Fourth session (nvidia-h200-x2, BENCHMARKS "Why the curve fell"): five streams, three on GPU 0 and two on GPU 1,
# N_TRAIN=256, EXTRA='--checkpoints 64,128,192,256': each ran its 256 requests in 478-676 s after `go`; 15.6
# minutes of device time in all (start without a part: the tree was 15.5 MiB, so .devadapt + part000 did not fit;
# the last part carried by the `go` call).
# Fifth session (nvidia-h200, the x2 kind not lent): `chat` and `chat-full` on the one GPU, same knobs; start carried
# .devadapt + manifest + part009 (the small last part), parts 000-008 one a call, `go` none; 256 requests in 508 and
# 416 s; 12.8 minutes of device time in all.  The tree stays light through `wait` (16.7 MiB light, 63.9 restored).
# Fifteenth session (2026-12-02, nvidia-h200): parts 2 and 3 (`repo`, `language`, `drift`: the shipped drafter,
# INTERVAL=16, 512 requests each, all three at once on the one GPU) in 696-849 s after `go`, then `repo` and
# `language` again with EXTRA='--lora-rank 16 --lr 1e-3 --checkpoints 64,128,192,256' N_TRAIN=256 (379-388 s).  The
# light tree was 20.1 MiB, so the parts were packed with PART=40M (13 parts); start carried .devadapt + manifest +
# the last part.  Call `go` with its output in a file (`go ... > /tmp/go.log 2>&1 < /dev/null; tail /tmp/go.log`):
# piped into tail it held the call until its limit (the detached runs survived it).  27 minutes of device time.
# 2026-12-02, results/issue43/device-rank (nvidia-h200): `code`, `code-r64`, `code-lr3e3` at once, N_TRAIN=256 and the
# same checkpoints, 761-765 s each after `go` (updates 32-60 s).  The light tree was 22.7 MiB and the restored one 70,
# so the models (target + draft only: the code runs need no shipped drafter) were packed with PART=36M (13 parts),
# start carried .devadapt + manifest + the last part, the `go` call part011 and the first `wait`, and the tree stayed
# light until the last `wait` had returned.  20.2 minutes of device time, 1.5 of them a start that found no machine.
# 2026-12-02, results/issue43/device-long (nvidia-h200): `code-long` and `code-long-lr5e4` at once, N_TRAIN=512,
# EXTRA='--checkpoints 64,128,256,384,512', 1,112-1,121 s each after `go` (about 2.2 s a request); the same 13 parts,
# part011 with `go` and `wait $((545 - SECONDS))`, then `wait 540` and `wait 212`: 25.3 minutes of device time, which
# 512 requests of two streams just fit.  Between `light` and the first part call the index held the drafter again (the
# tool refused 11 calls at 70.6 MiB), and a commit made elsewhere while light deleted it from HEAD: run `size` right
# before each call, and after `restore` check `git ls-tree HEAD models/` (commit the drafter back if it is gone).
# 2026-12-02, results/issue43/device-stream (nvidia-h200, nineteenth session): `speed` (below: the trainer's update
# alone on the GPU, the last commit's against this tree's, 58.3 -> 38.0 s for 128 steps, the same bits) while the
# CUDA build ran, then `code-long` alone, N_TRAIN=1000, EXTRA='--checkpoints 64,128,256,512,640,768,1000': 736
# requests in 1,136 s after `go` (1.54 s a request; updates 29-38 s), stopped by the device time past the 640 point.
# The same 13 parts at PART=36M, the tree 24.5 MiB light; `start` carried .devadapt + manifest + part012, the part
# calls took 5 s each, and the machine goes back after 30 s idle (status: idle_release_s), so call without pauses.
# `speed` reads its records and the older backend/ from $W/carry/speed (start copied .devadapt there: later calls do
# not carry it).  24.6 minutes of device time in all.
# 2026-12-02, results/issue43/device-mb4 (nvidia-h200, twentieth session): `go code-long-mb4 chat-long-mb4` with
# N_TRAIN=1000 EXTRA='--checkpoints 64,128,256,512,768,1000': both 1,000-request streams at once in 742-748 s after
# `go` (0.74 s a request each; 128-record updates of four a step 5.5-12.3 s); then the ablation (`code-long-mb4-dm`'s
# flags) alone to 512 in 321 s.  The same 14 parts at PART=36M, the tree 25.1 MiB light; start carried .devadapt +
# manifest + part013, part012 went with `go`.  A first start was lost: the machine goes back after 30 s idle, and
# this session was away longer between `start` and the first part call.  26.2 minutes of device time in all.
# 2026-12-05, results/issue43/device-xl (nvidia-h200): `go chat-xl-mb4 drift-mb4` with `guard` beside them (below).
# Three starts found no machine first (271 s of device time: nvidia-h200, again, then nvidia-h100-x1, which then was
# not tried for 10 minutes; the fourth, 10 minutes later, got an H200).  The same 14 parts at PART=36M, the tree 26.2
# MiB light; start carried .devadapt + manifest + part013, 12 part calls (4 s each), part012 with `go` + `wait
# $((540 - SECONDS))`, then `wait 555` and `wait 150`.  The CUDA build took 210 s.  The guard stopped drift-mb4 after
# 96 requests (chat at 160, its projection then 327 s past the deadline: the first requests' pace, start-up and the
# first updates included, overstates the rest); chat-xl-mb4 alone then ran 0.63 s a request and its 1,500 in 1,029 s.
# 27.1 minutes of device time in all.  For a second stream beside a long first one, start `guard` with a deadline
# from the budget at `go` (budget_left_s less ~60 s) and expect it to be strict early on.
# 2026-12-05, results/issue43/device-drift (nvidia-h100-x1, an H100 on the first call): `go drift-mb4` alone, to its 512
# requests in 631 s after `go` (updates 2.1 s median).  The parts and .devadapt of the session before were current (the
# drafter's sha256 as in the manifest, adapt_sets.py unchanged); the tree 27.0 MiB light, so 36 MiB parts just fit.
# start carried .devadapt + manifest + part013, 12 part calls (about 5 s of held time each, back to back), part012
# with `go` + `wait $((540 - SECONDS))` (the CUDA build 251 s on that host), then `wait 420` (ended after 271 s) and
# give_back at once: 16.7 minutes of device time in all.  drift-target was not run: the 1.5B (1,006 MB) is not in the
# parts (27 more calls at 36M), and beside drift-mb4 it would not have ended in the budget.
# 2026-12-05, results/issue43/device-drift-target (nvidia-h100-x1): PACK=drift-target PART=32M (the tree 28.1 MiB
# light): the two targets and the shipped drafter in 43 parts.  start carried .devadapt + manifest + part042, 41 part
# calls (about 4 s each), part041 with `go drift-target-mb4` + `wait` (ended in 307 s), then the reverse switch in one
# more call (`go` with EXTRA giving --target/--drift-target the other way round: later flags win; the first run's
# folder and log moved aside first) + `wait` (328 s), give_back: 14.7 minutes of device time in all.  The machine
# goes back after 30 s idle: chain the calls.
#
# 2026-12-06, results/issue43/device-1000 (nvidia-h100-x1): `go code-long-mb4 chat-long-mb4` again, N_TRAIN=1000,
# EXTRA='--checkpoints 64,128,256,512,1000 --keep-drafters', then `drafters` for goal 1's wall-clock on 2 cores.  With
# `LIGHT_RESULTS=1 device_tree.sh light` the tree was 3.8 MiB, so the 0.5B and SmolLM2-135M went as 9 parts of 54 MiB
# (`PART=54M device_xfer.sh pack adapt FILES`, the shipped drafter left out).  start carried .devadapt + manifest +
# part008, parts 000-006 one a call, part007 with `go` + `wait $((530 - SECONDS))` (the CUDA build 226 s), `wait 555`
# (both streams ended 680-704 s after `go`).  `drafters` packed for 277 s (the differences in parallel, then the
# control whole on one core: NO_CONTROL=1 skips that now), then one point a call by hand, latest first (the script's order now).  22.1 minutes of device time
# for all that, 4.5 more for two starts that found no machine.
#
# 2026-12-07, results/issue43/device-goal2 (nvidia-h200, an H100 came): `go repo-512 language-512`, PART=54M, the tree
# 4.0 MiB light: 9 parts.  start carried .devadapt + manifest (part008 alone is 53 MiB), parts 000-007 one a call,
# part008 with `go` + `wait $((560 - SECONDS))` (the CUDA build 170 s; both runs ended 379-381 s after `go`): 11.6
# minutes.  Later starts found no machine twice (about 3 minutes each) and calls made while none is tried cost 15 s
# each: ask once, and call again only after the wait the refusal names.
#
# Knobs: INTERVAL (32: records per update), N_TRAIN (the scenario's 1,000), THREADS (4 a stream), VERIFY (5 rows:
# the CUDA plan allows 3, which would cap the held-out k at 2), EXTRA (more adapt flags for every run).
set -euo pipefail
cd "$(dirname "$0")/../.."
ROOT=$(pwd)
VERSION=0.3.36
W=${ADAPT_WORK:-/tmp/ad}
OUT="${OUT:-/tmp/device-out}"
TARGET_FILE=qwen2.5-coder-0.5b-instruct-q4_0_pure.gguf DRAFT_FILE=SmolLM2-135M-Instruct.Q4_1.gguf
TARGET2_FILE=qwen2.5-coder-1.5b-instruct-q4_0_pure.gguf  # drift-target-mb4's second target (packed with PACK=drift-target)
TARGET15_FILE=qwen2.5-coder-1.5b-instruct-q4_k_m.gguf  # the file users download: the *-1.5b runs' target (PACK=unseen-1.5b)
EVERY64=64,128,192,256,320,384,448,512  # repo-512, language-512
SHIPPED=smollm2-135m-d8-qwen.gguf  # the bundled drafter: parts 2 and 3 start from it (it travels in the parts,
                                   # since device_tree.sh light keeps it out of the tree)
SETS="stdlib-code stdlib-code-long humaneval chat-long chat-xl chat javascript npm-cli-long nl-fr-long"
say() { echo "[adapt] $(date -u +%H:%M:%S) $*"; }

prepare() {  # here
  local py=.venv/bin/python carry=.devadapt cache tmp exclude
  exclude="$(git rev-parse --git-common-dir)/info/exclude"
  for d in /.devadapt/ /.devxfer/; do grep -qxF "$d" "$exclude" 2>/dev/null || echo "$d" >> "$exclude"; done
  mkdir -p "$carry/whl" "$carry/sets"
  if [ ! -f "$carry/llama_cpp_python-$VERSION-trimmed.tar.gz" ]; then  # as device_costmodel.sh trims them
    tmp=$(mktemp -d)
    "$py" -m pip download -q --no-deps --no-binary :all: -d "$tmp" "llama-cpp-python==$VERSION"
    tar xzf "$tmp/llama_cpp_python-$VERSION.tar.gz" -C "$tmp"
    ( cd "$tmp/llama_cpp_python-$VERSION" && rm -rf .git .github docs examples tests docker scripts mkdocs.yml
      cd vendor/llama.cpp
      rm -rf .git .github .gemini .pi models docs tests benches examples tools scripts conversion pocs app gguf-py \
             grammars prompts media .devops ci skills requirements licenses ./*.py
      cd ggml/src
      rm -rf ggml-sycl ggml-vulkan ggml-opencl ggml-hexagon ggml-et ggml-metal ggml-webgpu ggml-openvino \
             ggml-cann ggml-virtgpu ggml-musa ggml-hip ggml-zdnn ggml-rpc ggml-blas ggml-zendnn )
    tar czf "$carry/llama_cpp_python-$VERSION-trimmed.tar.gz" -C "$tmp" "llama_cpp_python-$VERSION"
    rm -rf "$tmp"
  fi
  # what the product needs beyond the image's Python there (3.12 with torch and transformers)
  "$py" -m pip download -q --no-deps --only-binary=:all: --python-version 3.12 --implementation cp \
    --platform manylinux_2_28_x86_64 --platform manylinux2014_x86_64 --platform manylinux_2_17_x86_64 \
    -d "$carry/whl" gguf==0.19.0 diskcache==5.6.3 flask==3.1.3 werkzeug==3.1.9 waitress==3.0.2 \
    itsdangerous==2.2.0 click==8.5.1 blinker==1.9.0 jinja2==3.1.6 markupsafe==3.0.4
  "$py" scripts/device/adapt_sets.py "$carry/sets" $SETS
  cache=$(PYTHONPATH=backend "$py" -c 'from omnidraft.assets import models; print(models.cache_dir())')
  # PACK=drift-target: the two targets and the shipped drafter (the runs from SmolLM2-135M cannot run then)
  local files=("$cache/models/derived/$TARGET_FILE" "$cache/models/$DRAFT_FILE" "models/$SHIPPED")
  [ "${PACK:-}" = drift-target ] &&
    files=("$cache/models/derived/$TARGET_FILE" "models/$SHIPPED" "$cache/models/derived/$TARGET2_FILE")
  # PACK=unseen-1.5b: SmolLM2-135M and the 1.5B Q4_K_M only (the *-1.5b runs)
  [ "${PACK:-}" = unseen-1.5b ] && files=("$cache/models/$DRAFT_FILE" "$cache/models/$TARGET15_FILE")
  bash scripts/device/device_xfer.sh pack adapt "${files[@]}"
  du -sh "$carry" .devxfer/adapt
}

site() {  # the carried wheels and the CUDA build on the path; the models where `go` joined them
  export PYTHONPATH="$W/llama-gpu:$W/site:$ROOT/backend:$ROOT" PYTHONUNBUFFERED=1 OMNIDRAFT_CACHE="$W/cache"
  mkdir -p "$OMNIDRAFT_CACHE"
}

start() {  # there, first call: the wheels, then both builds detached (CUDA ~190 s; CPU ~40 s, for the trainer)
  mkdir -p "$W/carry" "$W/site"
  cp -r .devadapt/. "$W/carry/"
  python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target "$W/site" \
    "$W"/carry/whl/*.whl
  bash scripts/device/device_xfer.sh recv adapt || true  # no part yet: grep -c counts 0 and fails
  say "$(nproc) cores; $(nvidia-smi --query-gpu=name,memory.total --format=csv,noheader 2>/dev/null)"
  python3 -c 'import torch, transformers; print("torch", torch.__version__, "cuda", torch.cuda.is_available(), "transformers", transformers.__version__)'
  E2E_WORK="$W" setsid nohup bash scripts/device/device_e2e.sh build-one gpu > "$W/build.log" 2>&1 < /dev/null &
  E2E_WORK="$W" setsid nohup bash scripts/device/device_e2e.sh build-one upstream > "$W/build-cpu.log" 2>&1 \
    < /dev/null &
  say "CUDA and CPU builds started (logs $W/build.log, $W/build-cpu.log)"
}

run_flags() {  # $1 = run name: its adapt flags (the scenario, the sets as snapshots, the device's settings)
  local s="$W/carry/sets" m="$W/m"
  local common="--target $m/$TARGET_FILE --draft $m/$DRAFT_FILE --gpu-layers -1 --trainer-device cuda
    --verify-batch ${VERIFY:-5} --interval ${INTERVAL:-32} --threads ${THREADS:-4} ${N_TRAIN:+--n-train $N_TRAIN}"
  # parts 2 and 3: the shipped drafter and the product's own update (full fine-tuning, lr 1e-4), the old domains
  # measured before and after and replayed; the later --draft wins
  local shipped="$common --draft $m/$SHIPPED --old-sets $s/stdlib-code.json,$s/chat.json"
  case $1 in
    repo) echo "--scenario repo --stream-set $s/npm-cli-long.json $shipped" ;;
    language) echo "--scenario language --stream-set $s/nl-fr-long.json $shipped" ;;
    drift) echo "--scenario drift-domain --stream-set $s/javascript.json --drift-set $s/nl-fr-long.json $shipped" ;;
    code) echo "--scenario unseen-code --stream-set $s/stdlib-code.json --eval-set $s/humaneval.json $common" ;;
    code-dm) echo "--scenario unseen-code --lam 0 --stream-set $s/stdlib-code.json --eval-set $s/humaneval.json $common" ;;
    chat) echo "--scenario unseen-chat --stream-set $s/chat-long.json --eval-set $s/chat-long.json $common" ;;
    # why the unseen-code curve fell after 128 requests (fourth session, 2026-11-28): one setting of full fine-tuning
    # at lr 1e-4 (the global default; the unseen scenarios' until then) changed each.  The unseen scenarios have used
    # code-lora's update since (adapt_scenarios.UNSEEN_UPDATE), so `code` is code-lora now and code-full the old one
    code-full) echo "$(run_flags code) --lora-rank 0 --lr 1e-4" ;;
    code-lr3e5) echo "$(run_flags code) --lora-rank 0 --lr 3e-5" ;;
    code-ep1) echo "$(run_flags code) --lora-rank 0 --lr 1e-4 --epochs 1" ;;
    code-recent256) echo "$(run_flags code) --lora-rank 0 --lr 1e-4 --recent 256" ;;  # all earlier records
    code-lora) echo "$(run_flags code) --lora-rank 16 --lr 1e-3" ;;  # rank 32 at 2e-4 hardly moved one (issue 26)
    chat-full) echo "$(run_flags chat) --lora-rank 0 --lr 1e-4" ;;  # the chat stream with the old update
    # does a larger rank or rate learn faster or higher than code's rank 16 at 1e-3 (issue 43, results/issue43/
    # device-rank)?  lora_alpha = rank (trainer/model.add_lora), so rank 64 keeps the adapter's scale at 1
    code-r64) echo "$(run_flags code) --lora-rank 64 --lr 1e-3" ;;
    code-lr3e3) echo "$(run_flags code) --lora-rank 16 --lr 3e-3" ;;
    # does it keep learning past stdlib-code's 298 prompts if the stream does not repeat (stdlib-code-long: 1,000
    # distinct heads, its first 298 stdlib-code's), with the default step and a smaller one (results/issue43/device-long)?
    code-long) echo "$(run_flags code) --stream-set $s/stdlib-code-long.json --lora-rank 16 --lr 1e-3" ;;
    code-long-lr5e4) echo "$(run_flags code) --stream-set $s/stdlib-code-long.json --lora-rank 16 --lr 5e-4" ;;
    # four records a step (--micro-batch 4: one padded forward, a quarter of the steps) at lr 2e-3 (Adam's square-root
    # rule for a batch 4x larger): does it learn like code-long at a quarter of the update's time, so that 1,000
    # requests of code and of chat fit a session's device time (results/issue43/device-mb4)?
    code-long-mb4) echo "$(run_flags code-long) --micro-batch 4 --lr 2e-3" ;;
    chat-long-mb4) echo "$(run_flags chat) --lora-rank 16 --micro-batch 4 --lr 2e-3" ;;
    code-long-mb4-dm) echo "$(run_flags code-long-mb4) --lam 0" ;;  # the paper's ablation there: L_DM alone
    # goal 1 as the issue words it (37th session): the streams served by the 1.5B, as downloaded (Q4_K_M), so that
    # the drafter learns the text of the target its wall-clock is timed with on 2 cores; packed with PACK=unseen-1.5b
    code-long-mb4-1.5b) echo "$(run_flags code-long-mb4) --target $m/$TARGET15_FILE" ;;
    chat-long-mb4-1.5b) echo "$(run_flags chat-long-mb4) --target $m/$TARGET15_FILE" ;;
    # parts 2 and 3 with the product's update since the fifteenth session (LoRA rank 16; four records a step at lr
    # 2e-3, as a GPU trainer runs it) to the scenarios' 512 requests, each point measured also from the stream's
    # n-gram cache (--eval-with-cache: the issue's recovery "with and without the n-gram cache"); INTERVAL=16
    repo-mb4) echo "$(run_flags repo) --interval 16 --micro-batch 4 --lr 2e-3 --eval-with-cache" ;;
    language-mb4) echo "$(run_flags language) --interval 16 --micro-batch 4 --lr 2e-3 --eval-with-cache" ;;
    # goal 2 to its 512 requests with that update (the fifteenth session's LoRA runs stopped at 256, still rising),
    # a point every 64; from an empty cache only, which gives the cache's figures to the token (results/issue43/
    # device-drift: the translator keeps the target's canonical tokens)
    repo-512) echo "$(run_flags repo) --interval 16 --micro-batch 4 --lr 2e-3 --checkpoints $EVERY64" ;;
    language-512) echo "$(run_flags language) --interval 16 --micro-batch 4 --lr 2e-3 --checkpoints $EVERY64" ;;
    # chat past 1,000 requests (the twentieth session's line reached +25 % tau at ~1,500): 2,000 distinct prompts.
    # Until a later fix on 2026-12-05 a checkpoint was measured only where an update falls (a multiple of --interval)
    # or at the end: 1,000 and 1,250 were skipped silently (results/issue43/device-xl), hence 992 and 1,248 (now a
    # checkpoint between updates measures the last update's drafter)
    chat-xl-mb4) echo "$(run_flags chat-long-mb4) --stream-set $s/chat-xl.json --interval 32 --n-train 1500
      --checkpoints 64,128,256,512,768,992,1248,1500" ;;
    drift-mb4) echo "$(run_flags drift) --interval 16 --micro-batch 4 --lr 2e-3 --eval-with-cache" ;;
    # the target switch (0.5B -> 1.5B half-way) with the same update; without --eval-with-cache, which drift-mb4
    # showed to repeat every point to the token (the translator's candidates never depend on the cache's merges)
    drift-target-mb4) echo "--scenario drift-target --stream-set $s/javascript.json --drift-target $m/$TARGET2_FILE
      $shipped --interval 16 --micro-batch 4 --lr 2e-3" ;;
    *) echo "unknown run $1" >&2; return 2 ;;
  esac
}

go() {  # there: the build done, the models joined, each run started detached from a private copy of the code
  local end=$((SECONDS + 420))
  until { grep -q "gpu build:" "$W/builds.txt" && grep -q "upstream build:" "$W/builds.txt"; } 2>/dev/null ||
    [ $SECONDS -ge $end ]; do sleep 5; done
  tail -n 3 "$W/build.log"; cat "$W/builds.txt" 2>/dev/null || { say "no CUDA build"; return 1; }
  [ -f "$W/m/$TARGET_FILE" ] || [ -f "$W/m/$TARGET15_FILE" ] || bash scripts/device/device_xfer.sh join adapt "$W/m"
  rm -rf "$W/code" && mkdir -p "$W/code" && cp -r backend gguf_tools scripts models "$W/code/"
  site
  ( cd "$W/code" && python3 -c 'import omnidraft, llama_cpp; print("llama_cpp", llama_cpp.__file__)' )
  # the trainer's export + check aborted with the CUDA build beside torch (free(): invalid pointer, 2026-11-28):
  # its children import the CPU build (device_e2e.sh's `upstream`) first where there is one
  [ -f "$W/llama-upstream/llama_cpp/__init__.py" ] && export OMNIDRAFT_TRAINER_PATH="$W/llama-upstream"
  local gpus i=0
  gpus=$(nvidia-smi -L 2>/dev/null | grep -c '^GPU' || true); [ "${gpus:-0}" -ge 1 ] || gpus=1
  for name in "$@"; do
    local flags
    flags=$(run_flags "$name")
    # runs spread over the GPUs in turn (each stream's generation and trainer on one)
    ( cd "$W/code" && CUDA_VISIBLE_DEVICES=$((i % gpus)) PYTHONPATH="$W/llama-gpu:$W/site:$W/code/backend:$W/code" setsid nohup python3 -X faulthandler \
        -m omnidraft.apps.cli adapt $flags ${EXTRA:-} --out "$W/run-$name" > "$W/run-$name.log" 2>&1 < /dev/null &
      echo $! > "$W/run-$name.pid" )
    say "started $name on GPU $((i % gpus)): adapt $flags"
    i=$((i + 1))
  done
}

speed() {  # there, once the parts are in: one update alone on the GPU, the last commit's trainer (.devadapt/speed/
           # backend) then this tree's, on the same records (trainer_speed.py: 32 new + 32 recent, 2 epochs = 128 steps)
  local end=$((SECONDS + 200)) s=$W/carry/speed
  until grep -q "upstream build:" "$W/builds.txt" 2>/dev/null || [ $SECONDS -ge $end ]; do sleep 5; done  # the
  # trainer imports llama_cpp (omnidraft.llama): the CPU build's, ready before the CUDA one
  [ -f "$W/m/$DRAFT_FILE" ] || bash scripts/device/device_xfer.sh join adapt "$W/m"
  site
  export PYTHONPATH="$W/llama-upstream:$PYTHONPATH"
  for side in base new; do
    local code=$ROOT/backend ref=(--compare "$OUT/speed-base.pt")
    [ $side = base ] && code=$s/backend ref=(--save "$OUT/speed-base.pt")
    python3 scripts/lab/trainer_speed.py --code "$code" --records "$s/records.jsonl" --model "$W/m/$DRAFT_FILE" \
      --new 32 --recent 32 --device cuda --threads "${THREADS:-4}" "${ref[@]}" --out "$OUT/speed-$side.json" 2>&1 |
      grep -E '"(code|steps|train_pass_s|step_s|merge_s|bitwise_equal|max_abs_weight_diff|max_abs_loss_diff)"'
  done
  rm -f "$OUT/speed-base.pt"
  nvidia-smi --query-gpu=name,utilization.gpu,memory.used --format=csv,noheader 2>/dev/null || true
}

guard() {  # there: $1 = the run that must end, $2 = the run to stop for it, $3 = $1's requests, $4 = its deadline
  local log="$W/run-$1.log" p n now n0="" t0="" seen="" proj g
  while sleep 10; do
    p=$(pgrep -f -- "--out $W/run-$2\$" | head -n 1 || true)
    [ -n "$p" ] || { [ -n "$seen" ] && return 0; continue; }  # not started yet, or ended
    seen=1
    n=$(grep -oE '^prompt +[0-9]+ ' "$log" 2>/dev/null | tail -n 1 | tr -dc 0-9 || true)
    [ -n "$n" ] || continue
    now=$(date +%s)
    [ -n "$n0" ] || { n0=$n t0=$now; continue; }
    [ $((n - n0)) -ge 100 ] || continue
    proj=$((now + ($3 - n) * (now - t0) / (n - n0)))
    say "$1 at $n: projected end $((proj - $4)) s from the deadline"
    if [ "$proj" -gt "$4" ]; then
      g=$(ps -o pgid= -p "$p" | tr -d ' ')
      kill -TERM -- "-$g" && say "$2 stopped (process group $g) so that $1 keeps its end"
      return 0
    fi
  done
}

wait_runs() {  # there: until every run has ended or SECONDS passed; what each has so far into $OUT
  local end=$((SECONDS + ${1:-500})) alive
  while :; do
    alive=0
    # by command line: under job control setsid forks, so the pid `go` saw has exited while the run goes on
    for p in "$W"/run-*.pid; do
      local n=${p##*/run-}
      pgrep -f -- "--out $W/run-${n%.pid}\$" > /dev/null && alive=$((alive + 1))
    done
    [ $alive = 0 ] || [ $SECONDS -ge $end ] && break
    sleep 10
  done
  say "$alive run(s) still going"
  for log in "$W"/run-*.log; do
    local name=${log##*/run-} d
    name=${name%.log} d="$W/run-$name"
    grep -E "^(held-out|old domain|after|prompt +[0-9]*0 |slowest|update)" "$log" | tail -n 12 || true
    tar czf "$OUT/$name.tgz" -C "$W" "run-$name.log" $(cd "$W" && ls -d "run-$name"/adapt.json "run-$name"/adapt.png \
      "run-$name"/trainer.log "run-$name"/trainer/registry/*.json 2>/dev/null) 2>/dev/null || true
  done
  nvidia-smi --query-gpu=utilization.gpu,memory.used --format=csv,noheader 2>/dev/null || true
  uptime
}

drafters() {  # there, after `wait`: each run's kept drafters (EXTRA=--keep-drafters) as differences from its control
             # (gguf_delta.py), the control whole once, in 15 MiB pieces; each call sends at most 4 pieces (the
             # 8-file, 64 MiB limit of what comes back) to $OUT/dr/RUN/; call again until it says 0 left.  Here:
             # cat each FILE.xz.p* > FILE.xz, then gguf_delta.py unpack --from DIR (the control travels whole).
             # NO_CONTROL=1: the control stays there (145 MB packed whole on one core, then 9 pieces to send;
             # `trainer export --qtype q8_0` of the same base here gives the same bytes: compare the sha256 it
             # prints).  Pieces go latest point first, so the stream's end arrives first if the budget runs out
  local p=$W/pack n=0 f left=0 first=""
  if [ ! -f "$p/done" ]; then
    for name in "$@"; do
      local d=$W/run-$name c
      c=$(ls "$d"/control-*.gguf | head -n 1)
      python3 scripts/lab/gguf_delta.py pack --base "$c" --out "$p/$name" --jobs 16 "$d"/drafters/*.gguf
      # the runs share a control where they share a base: it travels once
      if [ -n "${NO_CONTROL:-}" ]; then
        say "$name's control kept here: $(sha256sum "$c" | cut -c1-16) (NO_CONTROL)"
      elif [ -z "$first" ] || ! cmp -s "$c" "$first"; then
        python3 scripts/lab/gguf_delta.py pack --whole --out "$p/$name" "$c"
      else
        say "$name's control is ${first##*/run-}'s, byte for byte"
      fi
      first=${first:-$c}
    done
    (cd "$p" && for f in */*.xz; do split -b 15M -d -a 2 "$f" "$f.p" && rm "$f"; done)
    touch "$p/done"
  fi
  # a control first (the base of the rest), then the points from the last back (after-NNNN sorts by point)
  for f in $(cd "$p" && ls -- */*.xz.p[0-9][0-9] | awk -F/ '{print ($2 ~ /^control/ ? 1 : 0), $2, $0}' |
             sort -k1,1r -k2,2r | cut -d' ' -f3); do
    [ -f "$p/$f.sent" ] && continue
    if [ $n -lt 4 ]; then
      mkdir -p "$OUT/dr/${f%%/*}"; cp "$p/$f" "$OUT/dr/$f"; touch "$p/$f.sent"; n=$((n + 1))
    else
      left=$((left + 1))
    fi
  done
  for f in "$p"/*/manifest.json; do mkdir -p "$OUT/dr/$(basename "$(dirname "$f")")"; cp "$f" "$OUT/dr/${f#$p/}"; done
  say "sent $n piece(s), $left left"
}

case "${1:-}" in
  prepare) prepare ;;
  drafters) shift; drafters "$@" ;;
  start) start ;;
  go) shift; go "$@" ;;
  wait) wait_runs "${2:-500}" ;;
  guard) guard "$2" "$3" "$4" "$5" ;;
  speed) speed ;;
  *) sed -n '2,/^set /p' "$0" | grep '^#' >&2; exit 2 ;;
esac
