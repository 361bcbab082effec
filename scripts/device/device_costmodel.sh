#!/usr/bin/env bash
# Cost model of the lent GPU machine from random-weight copies of the default models (issue 9).
#
#   scripts/device/device_costmodel.sh prepare      # here: fill .devcarry/ (trimmed llama.cpp sources, wheels, skeletons)
#   scripts/device/device_costmodel.sh cpu [THREADS] # there: CPU build, synthesize, time at 1,2,4,8 threads
#   scripts/device/device_costmodel.sh gpu           # there: CUDA build, synthesize, time fully offloaded
#
# On the device machine, through the device tool, from the repository root:
#   run(command="bash scripts/device/device_costmodel.sh cpu", carry=[".devcarry"])
#   run(command="bash scripts/device/device_costmodel.sh gpu", carry=[".devcarry"])
# JSON, build and run logs land in $OUT (device-cpu.json / device-gpu.json); copy them to results/.
# .devcarry/ is listed in .git/info/exclude and travels only through `carry` (about 9 MB).
set -euo pipefail
cd "$(dirname "$0")/../.."
ROOT=$(pwd)
CARRY="$ROOT/.devcarry"
MODE="${1:?usage: $0 prepare|cpu|gpu [threads]}"
THREADS="${2:-1,2,4,8}"
VERSION=0.3.36
OUT="${OUT:-/tmp/device-out}"
MODELS="${MODELS:-smollm2-135m,qwen2.5-coder-0.5b,qwen2.5-coder-1.5b,gemma3-270m}"

prepare() {
  # Everything the device machine cannot fetch, trimmed to a few MB.
  local py="${PYTHON:-.venv/bin/python}" tmp
  mkdir -p "$CARRY/whl" "$CARRY/skeletons"
  local exclude
  exclude="$(git rev-parse --git-common-dir)/info/exclude"  # .git is a file in a worktree
  grep -qx '/.devcarry/' "$exclude" 2>/dev/null || echo '/.devcarry/' >> "$exclude"
  "$py" -m pip download -q --no-deps --only-binary=:all: --python-version 3.12 --implementation cp \
    --platform manylinux_2_28_x86_64 --platform manylinux2014_x86_64 -d "$CARRY/whl" gguf==0.19.0 diskcache==5.6.3
  if [ ! -f "$CARRY/llama_cpp_python-$VERSION-trimmed.tar.gz" ]; then
    tmp=$(mktemp -d)
    "$py" -m pip download -q --no-deps --no-binary :all: -d "$tmp" "llama-cpp-python==$VERSION"
    tar xzf "$tmp/llama_cpp_python-$VERSION.tar.gz" -C "$tmp"
    ( cd "$tmp/llama_cpp_python-$VERSION"
      rm -rf .git .github docs examples tests docker scripts mkdocs.yml
      cd vendor/llama.cpp
      rm -rf .git .github .gemini .pi models docs tests benches examples tools scripts conversion pocs app gguf-py \
             grammars prompts media .devops ci skills requirements licenses ./*.py
      cd ggml/src
      rm -rf ggml-sycl ggml-vulkan ggml-opencl ggml-hexagon ggml-et ggml-metal ggml-webgpu ggml-openvino \
             ggml-cann ggml-virtgpu ggml-musa ggml-hip ggml-zdnn ggml-rpc ggml-blas ggml-zendnn )
    tar czf "$CARRY/llama_cpp_python-$VERSION-trimmed.tar.gz" -C "$tmp" "llama_cpp_python-$VERSION"
    rm -rf "$tmp"
  fi
  PYTHONPATH=backend:. "$py" - "$CARRY/skeletons" "$MODELS" <<'EOF'
import sys
from pathlib import Path
from omnidraft.assets import models
from gguf_tools import synth
for name in sys.argv[2].split(","):
    out = Path(sys.argv[1]) / f"{name}.gguf.gz"
    if not out.exists():
        synth.skeleton(models.resolve(name), out)
EOF
  du -sh "$CARRY"
}

build() {  # $1 = cpu | gpu: llama-cpp-python into /tmp/llama-$1 with the project's CPU flags (+ CUDA)
  local args="-DLLAVA_BUILD=OFF -DGGML_LLAMAFILE=OFF"
  # -march=native on the lent Xeon turns on AMX, and every model load then segfaulted there (2026-11-26);
  # name the AVX-512 features instead (what this project's 2-core AMD EPYC has, and no phone has AMX either)
  args="$args -DGGML_NATIVE=OFF -DGGML_AVX=ON -DGGML_AVX2=ON -DGGML_FMA=ON -DGGML_F16C=ON -DGGML_BMI2=ON"
  args="$args -DGGML_AVX512=ON -DGGML_AVX512_VBMI=ON -DGGML_AVX512_VNNI=ON -DGGML_AVX512_BF16=ON -DGGML_AVX_VNNI=ON"
  if [ "$1" = gpu ]; then
    # sm_90 only (H100/H200); no FlashAttention kernels (the engine runs without them); one GPU: no NCCL
    args="$args -DGGML_CUDA=on -DCMAKE_CUDA_ARCHITECTURES=90 -DGGML_CUDA_FA=OFF -DGGML_CUDA_NCCL=OFF"
  fi
  export CMAKE_ARGS="$args" CMAKE_GENERATOR=Ninja CMAKE_BUILD_PARALLEL_LEVEL="$(nproc)"
  rm -rf "/tmp/src-$1" && mkdir -p "/tmp/src-$1"
  tar xzf "$CARRY/llama_cpp_python-$VERSION-trimmed.tar.gz" -C "/tmp/src-$1"
  local t0=$SECONDS
  python3 -m pip install -v --no-build-isolation --no-deps --no-cache-dir --no-compile --target "/tmp/llama-$1" \
    "/tmp/src-$1/llama_cpp_python-$VERSION" > "$OUT/build-$1.log" 2>&1 \
    || { tail -40 "$OUT/build-$1.log"; exit 1; }
  echo "[device] $1 build: $((SECONDS - t0)) s (CMAKE_ARGS=$CMAKE_ARGS)"
}

device_run() {  # $1 = cpu | gpu
  mkdir -p "$OUT"
  echo "[device] $(nproc) cores; $(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2)"
  nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv,noheader 2>/dev/null || true
  python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site \
    "$CARRY"/whl/*.whl
  if [ -n "${LLAMA_PREBUILT:-}" ]; then  # a CPU build made elsewhere (x86-64), e.g. this project's own venv
    mkdir -p /tmp/llama-pre && tar xzf "$LLAMA_PREBUILT" -C /tmp/llama-pre
    for f in /tmp/llama-pre/llama_cpp/lib/lib*.so; do [ -e "$f.0" ] || ln -s "$(basename "$f")" "$f.0"; done
    echo "[device] prebuilt llama_cpp from $LLAMA_PREBUILT"
  fi
  if [ -n "${LLAMA_PREBUILT:-}" ] && [ "$1" = cpu ]; then
    rm -rf /tmp/llama-cpu && ln -s /tmp/llama-pre /tmp/llama-cpu
  elif [ -n "${LLAMA_PREBUILT:-}" ]; then  # GPU: synthesize with the prebuilt CPU build while nvcc runs
    build "$1" & local bpid=$!
    PYTHONPATH="/tmp/llama-pre:/tmp/site:$ROOT/backend:$ROOT" python3 -m omnidraft.bench.device --synth-only \
      --skeletons "$CARRY/skeletons" --work /tmp/synthetic --models "$MODELS" --out /dev/null 2>&1 | grep -v gguf
    wait $bpid
  else
    build "$1"
  fi
  ls -la "/tmp/llama-$1/llama_cpp/lib"; ldd "/tmp/llama-$1/llama_cpp/lib/libllama.so"
  export PYTHONPATH="/tmp/llama-$1:/tmp/site:$ROOT/backend:$ROOT" PYTHONUNBUFFERED=1
  # the build there compiles with /opt/gcc; a model load segfaulted in init_tokenizer when an older
  # libstdc++ was loaded first (by numpy): load the compiler's own
  for lib in /opt/gcc/lib64/libstdc++.so.6 /opt/gcc/lib/libstdc++.so.6; do
    if [ -z "${LLAMA_PREBUILT:-}${LD_PRELOAD:-}" ] || [ "$1" = gpu ]; then
      [ -e "$lib" ] && export LD_PRELOAD="$lib" && echo "[device] LD_PRELOAD=$lib" && break
    fi
  done
  local gpu_flag="" label="cpu"
  if [ "$1" = gpu ]; then gpu_flag="--gpu"; label="gpu"; fi
  python3 -X faulthandler -c 'import sys, llama_cpp; print(llama_cpp.llama_print_system_info().decode())'
  python3 -m omnidraft.bench.device --skeletons "$CARRY/skeletons" --work /tmp/synthetic --models "$MODELS" \
    --threads "$THREADS" $gpu_flag --label "$label" --out "$OUT/device-$1.json" 2>&1 | tee "$OUT/run-$1.log"
}

diag() {  # a fresh CPU build: its libraries and one model load, verbose (after a cpu run left models in /tmp)
  mkdir -p "$OUT"
  build cpu
  ls -la /tmp/llama-cpu/llama_cpp/lib; ldd /tmp/llama-cpu/llama_cpp/lib/libllama.so
  PYTHONPATH="/tmp/llama-cpu:/tmp/site:$ROOT/backend:$ROOT" python3 -X faulthandler -c '
import llama_cpp, sys
print(llama_cpp.__file__, llama_cpp.llama_print_system_info().decode())
m = llama_cpp.Llama(sys.argv[1], n_ctx=256, verbose=True)
print(m("def f", max_tokens=4))' /tmp/synthetic/smollm2-135m-synthetic.gguf 2>&1 | tail -40
}

case "$MODE" in
  prepare) prepare ;;
  cpu|gpu) device_run "$MODE" ;;
  diag) diag ;;
  *) echo "usage: $0 prepare|cpu|gpu [threads]" >&2; exit 2 ;;
esac
