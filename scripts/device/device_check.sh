#!/usr/bin/env bash
# The project on the lent GPU machine (issues 12 and 13): build llama-cpp-python there with the flags
# backend/omnidraft/llama/build.py names for that CPU, run `omnidraft doctor` (the build probe through
# the product's own Engine), measure each kernel mode's fidelity and pass times on random-weight
# models of the real shapes (Q4_K_M as shipped, Q4_0 requantized) at 4 and 8 threads, then the same
# with a CUDA build on the GPU.
#
#   here:   MODELS=qwen2.5-coder-0.5b,qwen2.5-coder-1.5b,smollm2-135m bash scripts/device/device_costmodel.sh prepare
#   there:  run(command="bash scripts/device/device_check.sh", carry=[".devcarry"], timeout_s=600)
# Results land in $OUT: doctor-{cpu,gpu}.txt, targets-{cpu,gpu}.json, drafters-{cpu,gpu}.json, build logs.
set -uo pipefail
cd "$(dirname "$0")/../.."
ROOT=$(pwd)
CARRY="$ROOT/.devcarry"
OUT="${OUT:-/tmp/device-out}"
VERSION=0.3.36
THREADS="${THREADS:-4,8}"
mkdir -p "$OUT"
python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site \
  "$CARRY"/whl/*.whl

build() {  # $1 = cpu | gpu
  [ -f "/tmp/llama-$1/llama_cpp/__init__.py" ] && return 0  # still there on a warm machine
  local args
  args="$(python3 backend/omnidraft/llama/build.py cmake-args native)"
  if [ "$1" = gpu ]; then
    args="$args -DGGML_CUDA=on -DCMAKE_CUDA_ARCHITECTURES=90 -DGGML_CUDA_FA=OFF -DGGML_CUDA_NCCL=OFF"
  fi
  rm -rf "/tmp/src-$1" && mkdir -p "/tmp/src-$1"
  tar xzf "$CARRY/llama_cpp_python-$VERSION-trimmed.tar.gz" -C "/tmp/src-$1"
  local t0=$SECONDS
  CC="${DEVICE_CC:-${CC:-gcc}}" CXX="${DEVICE_CXX:-${CXX:-g++}}" CMAKE_ARGS="$args" CMAKE_GENERATOR=Ninja CMAKE_BUILD_PARALLEL_LEVEL="$(nproc)" \
    python3 -m pip install -v --no-build-isolation --no-deps --no-cache-dir --no-compile \
    --target "/tmp/llama-$1" "/tmp/src-$1/llama_cpp_python-$VERSION" > "$OUT/build-$1.log" 2>&1 \
    || { tail -30 "$OUT/build-$1.log"; return 1; }
  echo "[device] $1 build: $((SECONDS - t0)) s; CC=${DEVICE_CC:-${CC:-gcc}}; CMAKE_ARGS=$args" | tee -a "$OUT/builds.txt"
}

kernels() {  # $1 = cpu | gpu: fidelity + pass times per mode and quantization, then drafter depths
  local th="$THREADS"; [ "$1" = gpu ] && th="${THREADS%%,*}"
  for what in targets drafters; do
    PYTHONPATH="/tmp/llama-$1:/tmp/site:$ROOT/backend:$ROOT" python3 scripts/device/device_kernels.py "$what" \
      --device "$1" --threads "$th" --skeletons "$CARRY/skeletons" --out "$OUT/$what-$1.json"
  done
}

# The image's Python loads the system libstdc++ (through numpy) before libllama, which was compiled by
# /opt/gcc: the probe then dies with SIGSEGV in the first decode.  Load the compiler's own runtime.
for lib in /opt/gcc/lib64/libstdc++.so.6 /opt/gcc/lib/libstdc++.so.6 \
           $(find /opt/gcc -name 'libstdc++.so.6*' 2>/dev/null | sort) $(find /opt/gcc -name 'libstdc++.so' 2>/dev/null); do
  [ -e "$lib" ] && export LD_PRELOAD="$(readlink -f "$lib")" && echo "[device] LD_PRELOAD=$LD_PRELOAD" && break
done
echo "[device] $(nproc) cores; $(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2)"
nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv,noheader 2>/dev/null || true
BUILDS=" ${DEVICE_BUILDS:-cpu gpu} "  # e.g. DEVICE_BUILDS=gpu: only the CUDA half
[[ $BUILDS == *" cpu "* ]] && build cpu && {
  PYTHONPATH="/tmp/llama-cpu:/tmp/site:$ROOT/backend:$ROOT" python3 -m omnidraft.apps.cli doctor 2>&1 \
    | tee "$OUT/doctor-cpu.txt"
  kernels cpu 2>&1 | tail -20
}
[[ $BUILDS == *" gpu "* ]] && build gpu && {
  PYTHONPATH="/tmp/llama-gpu:/tmp/site:$ROOT/backend:$ROOT" python3 -m omnidraft.apps.cli doctor --gpu-layers -1 2>&1 \
    | tee "$OUT/doctor-gpu.txt"
  kernels gpu 2>&1 | tail -10
}
