#!/usr/bin/env bash
# End to end on the lent GPU machine (issue 28): the default generation and fixed k = 2..6 against the target
# alone and plain llama-cpp-python, both Qwen targets in Q4_0 (pure) and Q4_K_M, held-out code (humaneval) and
# chat, the device CPU at 4, 8, 16 threads and the H100 with full offload; per-step breakdown and the cost
# policy's choices.  docs/DEVICE.md ("End-to-end on the device") has the exact call sequence.
#
#   here:  scripts/device/device_e2e.sh prepare       .deve2e/ (trimmed llama.cpp sources, the kernel overlay, wheels,
#                                              prompt snapshots, derived files' sha256) and .devxfer/e2e/ (the
#                                              Q4_K_M targets + the bundled drafter in 48 MiB parts)
#   there: scripts/device/device_xfer.sh recv e2e     one call per part (run's carry: [".devxfer/e2e/partNNN"], the
#                                              first also ".devxfer/e2e/manifest")
#          scripts/device/device_e2e.sh build         three builds from .deve2e's sources at once: cpu (the project's
#                                              flags + small-batch kernel), upstream (no kernel, llamafile on:
#                                              plain llama-cpp-python built the same way), gpu (CUDA sm_90);
#                                              then, once every part is there, the models (join, q4_0_pure)
#          scripts/device/device_e2e.sh models        join the parts into $OMNIDRAFT_CACHE, derive the q4_0_pure files
#          scripts/device/device_e2e.sh cpu THREADS...  bench runs at each thread count (+ the upstream build's peer run)
#          scripts/device/device_e2e.sh gpu           bench runs fully offloaded: the kernel plan, then batches forced to 7
#          scripts/device/device_e2e.sh all [THREADS...]  gpu, then cpu (default 16 8 4), summarising after each place
#          scripts/device/device_e2e.sh recheck       a second round (BUILDS="cpu gpu"): scripts/lab/gpu_divergence.py on chat
#                                              for the 1.5B in both formats, the GPU sweep again (gpu-guard),
#                                              the Q4_0 targets at 16 and 8 threads again (cpuN-guard)
#          scripts/device/device_e2e.sh resume        the guard's kept verdict across processes: the 1.5B on the GPU,
#                                              one `omnidraft generate` process a prompt (scripts/lab/guard_resume.py)
#          scripts/device/device_e2e.sh threads [THREADS...]  the drafter's auto-tuned threads against all (8 16 4)
#          scripts/device/device_e2e.sh gpu-hybrid    the default method on the GPU (q4_0_pure targets), then resume
#          scripts/device/device_e2e.sh round3        threads 8 16, gpu-hybrid, threads 4 (the third round, 2026-11-28)
#          scripts/device/device_e2e.sh seed DIR      no e2e parts: the 1.5B q4_0_pure and the drafter (bundled and
#                                              q4_0_pure) from DIR (a distill run's /tmp/m) into the cache, for
#                                              PURE=qwen2.5-coder-1.5b:q4_0_pure runs beside a distill run
#          scripts/device/device_e2e.sh bg NAME STEP ARGS...   a step detached (longer than one call); log /tmp/e2e/NAME.log
#          scripts/device/device_e2e.sh wait NAME SECONDS [TEXT]   until it ends (or its log holds TEXT); its log's tail,
#                                              and the results so far into $OUT, as fetch (NOFETCH=1: not)
#          scripts/device/device_e2e.sh fetch         the results so far into this call's $OUT (one .tgz + the summary)
#   here, a dry run on this machine's build and cache: LOCAL=1 scripts/device/device_e2e.sh cpu 2
#
# Knobs (environment): N prompts a set (2), TOKENS a prompt (64), KS fixed draft lengths (2,3,4,5,6),
# KS_KM for the Q4_K_M targets on the CPU (2: their fast kernels verify at most 3 rows, so the plan caps every
# k at 2, and their exact ones cost 2-3 decodes a 4-token pass), DRAFT (the bundled drafter
# in the speed format, as BENCHMARKS.md's speed table), SETS (the humaneval and chat snapshots), GPU_BATCH (7),
# GPU_N (4) and GPU_TOKENS (96) for the GPU runs, RESUME_N (4: resume's two disjoint rounds of the 8 snapshot
# prompts), METHODS (target,hybrid: the default method since 2026-11-28; the first rounds ran target,omnidraft).
set -euo pipefail
cd "$(dirname "$0")/../.."
ROOT=$(pwd)
VERSION=0.3.36
CARRY="$ROOT/.deve2e"
W=${E2E_WORK:-/tmp/e2e}
OUT="${OUT:-/tmp/device-out}"
N=${N:-2} TOKENS=${TOKENS:-64} KS=${KS:-2,3,4,5,6} KS_KM=${KS_KM:-2} GPU_BATCH=${GPU_BATCH:-7}
METHODS=${METHODS:-target,hybrid}  # the product's default method (omnidraft before 2026-11-28; add it to compare)
DRAFT=${DRAFT:-smollm2-135m-d8-qwen:q4_0_pure}
Q15=qwen2.5-coder-1.5b Q05=qwen2.5-coder-0.5b
PURE=${PURE:-$Q15:q4_0_pure,$Q05:q4_0_pure} KM=${KM:-$Q15,$Q05}  # the targets, by format
DRAFTER_FILE=models/smollm2-135m-d8-qwen.gguf
SETS=${SETS:-$W/carry/prompts/humaneval.json,$W/carry/prompts/chat.json}
BUILDS=${BUILDS:-cpu upstream gpu}  # which of the three `build` makes (e.g. BUILDS=gpu to retry one)
say() { echo "[e2e] $(date -u +%H:%M:%S) $*"; }

prepare() {  # here
  local py="${PYTHON:-.venv/bin/python}" tmp cache
  [ -x "$py" ] || py=/work/main/.venv/bin/python
  mkdir -p "$CARRY/whl" "$CARRY/prompts"
  local exclude
  exclude="$(git rev-parse --git-common-dir)/info/exclude"  # .git is a file in a worktree
  grep -qx '/.deve2e/' "$exclude" 2>/dev/null || echo '/.deve2e/' >> "$exclude"
  local trimmed=".devcarry/llama_cpp_python-$VERSION-trimmed.tar.gz"
  [ -f "$trimmed" ] || PYTHON="$py" MODELS=qwen2.5-coder-1.5b bash scripts/device/device_costmodel.sh prepare >/dev/null
  cp "$trimmed" "$CARRY/"
  # the small-batch kernel as an overlay of the 4 files it adds or changes (the machine there may lack patch(1))
  tmp=$(mktemp -d)
  tar xzf "$trimmed" -C "$tmp"
  PYTHONPATH=backend "$py" -c 'import sys; from omnidraft.llama import build; build.patch_tree(sys.argv[1])' \
    "$tmp/llama_cpp_python-$VERSION"
  ( cd "$tmp" && tar czf "$CARRY/sbq4-overlay.tgz" \
      "llama_cpp_python-$VERSION/vendor/llama.cpp/ggml/src/ggml-cpu/"{sbq4.cpp,sbq4.h,repack.cpp,CMakeLists.txt} )
  rm -rf "$tmp"
  # what the bench needs beyond the image's Python there (3.12: torch's venv; no flask, no gguf, no diskcache)
  "$py" -m pip download -q --no-deps --only-binary=:all: --python-version 3.12 --implementation cp \
    --platform manylinux_2_28_x86_64 --platform manylinux2014_x86_64 --platform manylinux_2_17_x86_64 \
    -d "$CARRY/whl" gguf==0.19.0 diskcache==5.6.3 tqdm jinja2 markupsafe typing_extensions
  PYTHONPATH=backend:. "$py" -m omnidraft.assets.snapshot export humaneval,chat 8 "$CARRY/prompts" >/dev/null
  cache=$(PYTHONPATH=backend:. "$py" -c 'from omnidraft.assets import models; print(models.cache_dir())')
  # the q4_0_pure files made there from the same inputs should be these bytes (checked, not required)
  ( cd "$cache/models/derived" && sha256sum qwen2.5-coder-1.5b-instruct-q4_0_pure.gguf \
      qwen2.5-coder-0.5b-instruct-q4_0_pure.gguf smollm2-135m-d8-q4_0_pure.gguf ) > "$CARRY/derived.sha256" \
    || echo "no derived files here to pin: they are made there unchecked" >&2
  bash scripts/device/device_xfer.sh pack e2e "$cache/models/qwen2.5-coder-1.5b-instruct-q4_k_m.gguf" \
    "$cache/models/qwen2.5-coder-0.5b-instruct-q4_k_m.gguf" "$DRAFTER_FILE"
  du -sh "$CARRY" .devxfer/e2e
  if git ls-files --error-unmatch "$DRAFTER_FILE" >/dev/null 2>&1; then
    echo "NOTE: $DRAFTER_FILE is tracked (48 MiB of every call): 'bash scripts/device/device_tree.sh light' for the" \
         "session, so that a part fits beside the tree; 'restore' afterwards (docs/DEVICE.md)"
  fi
}

pyenv() {  # $1 = cpu | upstream | gpu: the environment a step runs Python in
  if [ -n "${LOCAL:-}" ]; then
    export PYTHONPATH="$ROOT/backend:$ROOT" PY="${PYTHON:-/work/main/.venv/bin/python}"
  else
    export PYTHONPATH="$W/llama-$1:$W/site:$ROOT/backend:$ROOT" PY=${DEVICE_PY:-python3}
  fi
  export PYTHONUNBUFFERED=1 OMNIDRAFT_CACHE="$W/cache" TQDM_DISABLE=1
  [ "$1" = upstream ] && export OMNIDRAFT_CACHE="$W/cache-upstream"  # its own fidelity and cost entries
  mkdir -p "$OMNIDRAFT_CACHE"
  if [ -n "${LOCAL:-}" ]; then  # this machine's models, private state
    local home=${HOME}/.cache/omnidraft
    mkdir -p "$OMNIDRAFT_CACHE/datasets"
    [ -e "$OMNIDRAFT_CACHE/models" ] || ln -s "$home/models" "$OMNIDRAFT_CACHE/models"
  elif [ "$1" = upstream ]; then
    [ -e "$OMNIDRAFT_CACHE/models" ] || ln -s "$W/cache/models" "$OMNIDRAFT_CACHE/models"
  fi
}

build_one() {  # $1 = cpu | upstream | gpu -> $W/llama-$1
  [ -f "$W/llama-$1/llama_cpp/__init__.py" ] && { say "$1 build: already there"; return 0; }
  local args src="$W/src-$1" t0=$SECONDS
  args="$(python3 backend/omnidraft/llama/build.py cmake-args native)"
  case $1 in
    upstream) args="${args/-DGGML_LLAMAFILE=OFF/}" ;;  # pip's default: llamafile's kernels on
    gpu) args="$args -DGGML_CUDA=on -DCMAKE_CUDA_ARCHITECTURES=90 -DGGML_CUDA_FA=OFF -DGGML_CUDA_NCCL=OFF" ;;
  esac
  rm -rf "$src" && mkdir -p "$src"
  tar xzf "$W/carry/llama_cpp_python-$VERSION-trimmed.tar.gz" -C "$src"
  [ "$1" = cpu ] && tar xzf "$W/carry/sbq4-overlay.tgz" -C "$src"
  # the system compiler: /opt/gcc's builds segfaulted there at model load (docs/DEVICE.md)
  local cc=gcc cxx=g++
  [ -x /usr/bin/gcc ] && [ -x /usr/bin/g++ ] && cc=/usr/bin/gcc cxx=/usr/bin/g++
  CC="${DEVICE_CC:-$cc}" CXX="${DEVICE_CXX:-$cxx}" CMAKE_ARGS="$args" CMAKE_GENERATOR=Ninja \
    CMAKE_BUILD_PARALLEL_LEVEL="$(nproc)" python3 -m pip install -v --no-build-isolation --no-deps --no-cache-dir \
    --no-compile --target "$W/llama-$1" "$src/llama_cpp_python-$VERSION" > "$W/build-$1.log" 2>&1 \
    || { tail -30 "$W/build-$1.log"; say "$1 build FAILED"; return 1; }
  say "$1 build: $((SECONDS - t0)) s; CC=${DEVICE_CC:-$cc}; CMAKE_ARGS=$args" | tee -a "$W/builds.txt"
}

build() {  # there: the three builds at once (the CUDA one niced: the CPU builds are wanted first), then models
  mkdir -p "$W/carry" "$W/site"
  take_carry  # later calls (a retry) need not carry .deve2e again
  for whl in "$W"/carry/whl/*.whl; do  # one by one: a wheel the image's Python refuses costs only itself
    python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target "$W/site" \
      "$whl" || say "${whl##*/} did not install: the image's own package is used"
  done
  say "$(nproc) cores; $(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2); $(python3 --version)"
  nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv,noheader 2>/dev/null || true
  local t0=$SECONDS p_cpu=0 p_up=0 p_gpu=0
  [[ " $BUILDS " == *" cpu "* ]] && { build_one cpu & p_cpu=$!; }
  [[ " $BUILDS " == *" upstream "* ]] && { build_one upstream & p_up=$!; }
  [[ " $BUILDS " == *" gpu "* ]] && { nice -n 10 bash "$0" build-one gpu & p_gpu=$!; }
  [ $p_cpu = 0 ] || wait $p_cpu || say "cpu build failed: no models, no CPU runs (see build-cpu.log)"
  # the models while the others compile: every part must have arrived (device_xfer.sh recv, one call each)
  local want have end=$(( SECONDS + ${PARTS_WAIT:-900} ))
  until [ -f "$W/cache/models/.joined" ] || { [ -f /tmp/xfer/e2e/manifest ] &&
        want=$(awk '{s += $2} END {print s}' /tmp/xfer/e2e/manifest) &&
        have=$(stat -c %s /tmp/xfer/e2e/part[0-9][0-9][0-9] 2>/dev/null | awk '{s += $1} END {print s + 0}') &&
        [ "$have" -ge "$want" ]; }; do
    [ $SECONDS -ge $end ] && { say "parts still missing after ${PARTS_WAIT:-900} s"; break; }
    sleep 3
  done
  [ -f "$W/cache/models/.seeded" ] || models || say "models FAILED"
  [ $p_up = 0 ] || wait $p_up || say "upstream build failed: plain llama-cpp-python rows come from this build instead"
  [ $p_gpu = 0 ] || wait $p_gpu || say "gpu build failed"
  say "builds done in $((SECONDS - t0)) s"
}

models() {  # the parts joined into $OMNIDRAFT_CACHE (registry names work as here), q4_0_pure derived
  # (called where set -e does not reach, `models || ...`: every step that matters returns on failure itself)
  pyenv cpu
  local m="$OMNIDRAFT_CACHE/models" t0=$SECONDS
  if [ -z "${LOCAL:-}" ]; then
    if [ ! -f "$m/.joined" ]; then
      bash scripts/device/device_xfer.sh join e2e "$m" || { say "join failed: parts missing or damaged"; return 1; }
      touch "$m/.joined"
      rm -rf /tmp/xfer/e2e  # 1.6 GB of parts no longer needed
    fi
    mkdir -p "$W/drafter"
    [ -f "$m/$(basename "$DRAFTER_FILE")" ] && mv -f "$m/$(basename "$DRAFTER_FILE")" "$W/drafter/"
  fi
  local try
  for try in 1 2; do  # twice: see link_drafter
    link_drafter
    $PY -c '
import sys, time
from omnidraft.assets import models
for name in sys.argv[1:]:
    t0 = time.perf_counter()
    print(name, "->", models.resolve(name), f"({time.perf_counter() - t0:.1f} s)", flush=True)' \
      $Q15 $Q05 $Q15:q4_0_pure $Q05:q4_0_pure "$DRAFT" && break
    [ $try = 2 ] && { say "models could not be resolved or derived"; return 1; }
    say "models: resolving failed once (ls models/: $(ls "$ROOT/models" | tr '\n' ' ')); again"
  done
  [ -f "$W/carry/derived.sha256" ] && ( cd "$m/derived" && sha256sum -c "$W/carry/derived.sha256" ) \
    || say "derived files differ from here's (or no pin): results stand, provenance noted"
  mkdir -p "$OMNIDRAFT_CACHE/datasets"
  say "models ready in $((SECONDS - t0)) s"
}

seed() {  # DIR: the files a distill run received (device_xfer.sh join models DIR) stand in for the e2e parts
  local dir=$1 m="$W/cache/models"
  mkdir -p "$m/derived" "$W/drafter"
  pyenv cpu
  # a derived file is served when its stamp names the pinned file it came from (models.derived_source)
  local pins
  pins=$($PY -c 'from omnidraft.assets import models as m
print(m.get_spec(m.QWEN_15B).sha256, m.get_spec(m.SMOLLM2_D8).sha256)')
  ln -sf "$dir/qwen2.5-coder-1.5b-instruct-q4_0_pure.gguf" "$m/derived/"
  echo "${pins% *}" > "$m/derived/qwen2.5-coder-1.5b-instruct-q4_0_pure.gguf.from"
  ln -sf "$dir/smollm2-135m-d8-q4_0_pure.gguf" "$m/derived/"
  echo "${pins#* }" > "$m/derived/smollm2-135m-d8-q4_0_pure.gguf.from"
  ln -sf "$dir/$(basename "$DRAFTER_FILE")" "$W/drafter/"
  ( cd "$m/derived" && grep -E 'qwen2.5-coder-1.5b|smollm2' "$W/carry/derived.sha256" | sha256sum -c ) \
    || say "seeded files differ from here's derived files"
  touch "$m/.joined" "$m/.seeded"
  mkdir -p "$OMNIDRAFT_CACHE/datasets"
  say "seeded from $dir: $(ls "$m/derived" | tr '\n' ' ')"
}

need_models() {  # the models step, unless the parts were joined already (or LOCAL: this machine's cache)
  [ -n "${LOCAL:-}" ] || [ -f "$W/cache/models/.joined" ] || models
}

take_carry() {  # the carried files (sources, prompts, pins) into $W/carry, where the steps read them
  mkdir -p "$W/carry"
  [ ! -d "$CARRY" ] || cp -r "$CARRY/." "$W/carry/"
}

local_carry() {  # a LOCAL dry run takes them from here, as a call brings them
  [ -z "${LOCAL:-}" ] || take_carry
}

peer_build() {  # plain llama-cpp-python's build: upstream, else the project's where upstream was not made
  if [ -n "${LOCAL:-}" ] || [ -f "$W/llama-upstream/llama_cpp/__init__.py" ]; then echo upstream; else echo cpu; fi
}

link_drafter() {  # the bundled drafter travels in the parts: put it where the registry looks (models/)
  [ -n "${LOCAL:-}" ] && return 0
  # by $ROOT, not the working directory.  2026-11-28, on both machines: the build's models step could not find
  # the drafter it had just linked, and a `models` call right after could; the cause is not known (a step
  # detached by an earlier call, while later calls lay the tree down again, is a guess), so models tries twice
  [ -f "$ROOT/$DRAFTER_FILE" ] || ln -sf "$W/drafter/$(basename "$DRAFTER_FILE")" "$ROOT/$DRAFTER_FILE"
}

bench() {  # $1 = place (results folder), $2 = build (cpu|upstream|gpu), the rest: bench run flags
  local place=$1 b=$2 t0=$SECONDS
  shift 2
  pyenv "$b"
  link_drafter
  mkdir -p "$W/res/$place"
  say "$place ($b build): bench run $*"
  local rc=0
  $PY -X faulthandler -m omnidraft.apps.cli bench run --draft "$DRAFT" --sets "$SETS" --n "$N" \
    --max-tokens "$TOKENS" --methods "$METHODS" --no-gamma --no-plots --no-progress --out "$W/res/$place" \
    "$@" 2>&1 \
    | tee -a "$W/res/$place/run.log" || rc=$?
  # one place failing must not cost the others: said, and the sweep goes on
  [ $rc -eq 0 ] && say "$place: $((SECONDS - t0)) s" || say "$place: FAILED (exit $rc) after $((SECONDS - t0)) s"
}

summarize() {
  pyenv cpu
  $PY -m omnidraft.bench.e2e "$W/res" > /dev/null && say "summary: $W/res/e2e-summary.md" || say "summary FAILED"
}

cpu() {  # THREADS...: the project's build (Q4_0 pure with every k, Q4_K_M with KS_KM), then the upstream build
  [ $# -gt 0 ] || set -- 16 8 4
  local_carry
  need_models
  local up
  up=$(peer_build)
  for th in "$@"; do
    bench "cpu$th" cpu --threads "$th" --targets "$PURE" --ks "$KS" --adaptive-k 4
    bench "cpu$th" cpu --threads "$th" --targets "$KM" --ks "$KS_KM" --adaptive-k 4
    bench "cpu$th-upstream" "$up" --threads "$th" --targets "$PURE,$KM" --methods target --peer
    summarize
  done
  say "cpu done"
}

gpu() {  # the kernel plan (CUDA rows are bit-identical up to 3: k <= 2), then batches forced to GPU_BATCH
  need_models
  local g=gpu N=${GPU_N:-4} TOKENS=${GPU_TOKENS:-96}  # a step costs milliseconds there: more tokens, less noise
  [ -n "${LOCAL:-}" ] && g=cpu
  bench gpu "$g" --gpu-layers -1 --targets "$PURE,$KM" --ks 2 --adaptive-k 4 --peer
  bench "gpu-batch$GPU_BATCH" "$g" --gpu-layers -1 --targets "$PURE,$KM" --ks "$KS" --adaptive-k 4 \
    --verify-batch "$GPU_BATCH"
  summarize
  say "gpu done"
}

recheck() {  # a second round (BUILDS="cpu gpu"; gpu alone with RECHECK_THREADS=): divergence, the sweeps again
  need_models
  local g=gpu N=${GPU_N:-4} TOKENS=${GPU_TOKENS:-96} t
  [ -n "${LOCAL:-}" ] && g=cpu
  local_carry
  pyenv "$g"
  link_drafter
  mkdir -p "$W/res/diverge"
  for t in ${DIVERGE:-$Q15 $Q15:q4_0_pure}; do
    say "divergence: $t"
    $PY scripts/lab/gpu_divergence.py "$t" "$W/carry/prompts/chat.json" "$W/res/diverge/${t//[:.]/_}.json" \
      "$([ -n "${LOCAL:-}" ] && echo 0 || echo -1)" "$N" "$TOKENS" 2>&1 | tee -a "$W/res/diverge/run.log" \
      || say "divergence FAILED: $t"
  done
  bench gpu-guard "$g" --gpu-layers -1 --targets "$PURE,$KM" --ks 2 --adaptive-k 4 --peer
  summarize
  N=${N_CPU:-2} TOKENS=64
  for t in ${RECHECK_THREADS-16 8}; do  # the CPU places where the first round's default lost (RECHECK_THREADS= for none)
    [ -f "$W/llama-cpu/llama_cpp/__init__.py" ] || [ -n "${LOCAL:-}" ] || break
    bench "cpu$t-guard" cpu --threads "$t" --targets "$PURE" --ks 3 --adaptive-k 4
    summarize
  done
  say "recheck done"
}

resume() {  # issue 28: does the guard's kept verdict carry from one process to the next? (scripts/lab/guard_resume.py)
  need_models
  local g=gpu layers=-1 set
  [ -n "${LOCAL:-}" ] && g=cpu && layers=0
  local_carry
  pyenv "$g"
  link_drafter
  mkdir -p "$W/res/resume"
  for set in humaneval chat; do
    say "guard resume: $set"
    $PY scripts/lab/guard_resume.py "$Q15:q4_0_pure" "$W/carry/prompts/$set.json" "$W/res/resume/$set.json" \
      --draft "$DRAFT" --n "${RESUME_N:-4}" --tokens "${GPU_TOKENS:-96}" --gpu-layers "$layers" 2>&1 |
      tee -a "$W/res/resume/run.log" || say "guard resume FAILED: $set"
  done
  say "resume done"
}

threads() {  # THREADS... (8 16 4): the drafter on its own, auto-tuned thread count against all of them
  [ $# -gt 0 ] || set -- 8 16 4
  local_carry
  need_models
  local up th
  up=$(peer_build)
  for th in "$@"; do
    bench "cpu$th-auto" cpu --threads "$th" --targets "$PURE" --ks "${KS_T:-4}" --adaptive-k 4
    bench "cpu$th-all" cpu --threads "$th" --draft-threads "$th" --targets "$PURE" --ks "${KS_T:-4}" --adaptive-k 4
    bench "cpu$th-auto-upstream" "$up" --threads "$th" --targets "$PURE" --methods target --peer
    summarize
  done
  say "threads done"
}

gpu_hybrid() {  # the default method (hybrid) fully offloaded, the q4_0_pure targets, then the kept verdict
  need_models
  local g=gpu N=${GPU_N:-4} TOKENS=${GPU_TOKENS:-96}
  [ -n "${LOCAL:-}" ] && g=cpu
  bench gpu-hybrid "$g" --gpu-layers -1 --targets "$PURE" --ks 2 --adaptive-k 4 --peer
  summarize
  resume
}

fetch() {  # the results so far into this call's $OUT (one .tgz + the summary)
  mkdir -p "$OUT" "$W/res"
  cp "$W"/*.log "$W"/builds.txt "$W/res/" 2>/dev/null || true
  tar czf "$OUT/e2e-results.tgz" -C "$W" res
  cp "$W/res/e2e-summary.md" "$OUT/" 2>/dev/null || true
}

case "${1:-}" in
  threads) shift; threads "$@" ;;
  gpu-hybrid) gpu_hybrid ;;
  round3) threads 8 16; gpu_hybrid; threads 4; say "round3 done" ;;
  prepare) prepare ;;
  recheck) recheck ;;
  resume) resume ;;
  build) build ;;
  build-one) mkdir -p "$W"; build_one "$2" ;;
  models) models ;;
  seed) take_carry; seed "$2" ;;
  cpu) shift; cpu "$@" ;;
  gpu) gpu ;;
  all) shift; gpu; cpu "$@"; say "all done" ;;
  bg)
    name=$2; shift 2
    take_carry
    # from a private copy of the code, as distill_device.sh's bg: every later call lays the work tree down
    # again, and a module imported (or a file linked) while that happens is lost to the detached step
    rm -rf "$W/code-$name" && mkdir -p "$W/code-$name" && cp -r backend gguf_tools scripts models "$W/code-$name/"
    setsid nohup bash "$W/code-$name/scripts/device/device_e2e.sh" "$@" > "$W/$name.log" 2>&1 < /dev/null &
    echo $! > "$W/$name.pid"
    echo "started $name (pid $(cat "$W/$name.pid")): $*" ;;
  wait)
    pid=$(cat "$W/$2.pid") end=$(( SECONDS + $3 ))
    until ! kill -0 "$pid" 2>/dev/null || [ $SECONDS -ge "$end" ] ||
      { [ -n "${4:-}" ] && grep -qF -- "$4" "$W/$2.log"; }; do sleep 5; done
    kill -0 "$pid" 2>/dev/null && echo "$2: still running" || echo "$2: finished"
    tail -n "${TAIL:-30}" "$W/$2.log"
    # every wait brings back what is done so far: a machine lost between calls takes only the unfetched rest
    # (2026-11-28: the first machine of round 3 was gone after a 420-s wait, and its results with it)
    [ -n "${NOFETCH:-}" ] || fetch ;;
  fetch) fetch; ls -la "$OUT"; cat "$W/res/e2e-summary.md" 2>/dev/null | head -60 ;;
  *) sed -n '2,/^set /p' "$0" | grep '^#' >&2; exit 2 ;;
esac
