#!/usr/bin/env bash
# Install what the Android demo's tests need (tests/test_android_*.py).  Idempotent: installs only
# what is missing.  Debian 12; run as root (or with sudo available).
#
#   bash android_demo/ci_setup.sh [VENV]      # VENV defaults to .venv (gets the `playwright` package)
#
# Debian packages: chromium + chromium-driver (the browser the e2e tests drive; never a downloaded one),
# apktool, aapt, zipalign, apksigner, android-framework-res, openjdk-17-jdk-headless (keytool) and
# the shellcheck linter.  PyPI: playwright (its driver only; the browser is Debian's /usr/bin/chromium).
# On x86_64 also g++-aarch64-linux-gnu, clang and qemu-user: tests/test_sbk_arm.py and tests/test_sbq4_arm.py
# cross-build the small-batch kernels' aarch64 variants (sbq4 with GCC and with clang, Termux's compiler) and
# run them under qemu-aarch64; with cmake and ninja-build, tests/test_arm_ggml.py cross-builds the patched
# ggml itself and runs its mul_mat under qemu-aarch64.
set -euo pipefail
cd "$(dirname "$0")/.."
VENV="${1:-${OMNIDRAFT_VENV:-.venv}}"

PKGS=(chromium chromium-driver apktool aapt zipalign apksigner android-framework-res
      openjdk-17-jdk-headless shellcheck fonts-dejavu-core)
if [ "$(uname -m)" = x86_64 ]; then
  PKGS+=(g++-aarch64-linux-gnu clang qemu-user cmake ninja-build)
fi
missing=()
for p in "${PKGS[@]}"; do
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing+=("$p")
done
if [ "${#missing[@]}" -gt 0 ]; then
  SUDO=""
  [ "$(id -u)" -eq 0 ] || SUDO="sudo"
  echo "[android ci] apt-get install ${missing[*]}"
  $SUDO apt-get update -q
  DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -q --no-install-recommends "${missing[@]}"
else
  echo "[android ci] Debian packages present"
fi

if [ -x "$VENV/bin/python" ]; then
  if ! "$VENV/bin/python" -c "import playwright.sync_api" 2>/dev/null; then
    echo "[android ci] pip install playwright into $VENV"
    "$VENV/bin/python" -m pip install -q "playwright>=1.45"
  fi
else
  echo "[android ci] no venv at $VENV: run scripts/setup/setup.sh first, then this script" >&2
  exit 2
fi
echo "[android ci] ready: chromium $(chromium --version 2>/dev/null | awk '{print $2}'), apktool $(apktool --version)"
