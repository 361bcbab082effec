#!/usr/bin/env bash
# Build the omnidraft WebView shell APK offline with Debian's apktool, zipalign and apksigner.
#
#   android_demo/apk/build.sh                       # -> android_demo/apk/build/omnidraft-demo.apk
#   OMNIDRAFT_URL=http://192.168.1.20:8080/app/ android_demo/apk/build.sh   # another default server
#
# Environment: OUT_DIR (output folder), KEYSTORE (signing keystore; a debug one is generated
# there if missing, never committed), FRAMEWORK_RES (Android framework resources apktool links
# against; Debian's android-framework-res by default).
# Install:  adb install -r android_demo/apk/build/omnidraft-demo.apk
set -euo pipefail

HERE="$(cd "$(dirname "$0")" && pwd)"
OUT_DIR="${OUT_DIR:-$HERE/build}"
KEYSTORE="${KEYSTORE:-$OUT_DIR/debug.keystore}"
FRAMEWORK_RES="${FRAMEWORK_RES:-/usr/share/android-framework-res/framework-res.apk}"
APK="$OUT_DIR/omnidraft-demo.apk"

for tool in apktool zipalign apksigner aapt keytool; do
  command -v "$tool" >/dev/null || { echo "build.sh: $tool not found (run android_demo/ci_setup.sh)" >&2; exit 2; }
done
[ -f "$FRAMEWORK_RES" ] || { echo "build.sh: $FRAMEWORK_RES missing (apt-get install android-framework-res)" >&2; exit 2; }

WORK="$(mktemp -d)"
trap 'rm -rf "$WORK"' EXIT
mkdir -p "$OUT_DIR"
cp -r "$HERE/src" "$WORK/src"

if [ -n "${OMNIDRAFT_URL:-}" ]; then
  case "$OMNIDRAFT_URL" in
    *[[:space:]\'\"\<\>\\\|]*) echo "build.sh: OMNIDRAFT_URL has a character a URL should not" >&2; exit 2 ;;
    http://*|https://*) ;;
    *) echo "build.sh: OMNIDRAFT_URL must start with http:// or https://" >&2; exit 2 ;;
  esac
  # XML-escape '&' for strings.xml, then escape it again for sed's replacement text
  esc="$(printf '%s' "$OMNIDRAFT_URL" | sed -e 's/&/\&amp;/g' -e 's/&/\\&/g')"
  sed -i "s|<string name=\"server_url\">[^<]*</string>|<string name=\"server_url\">$esc</string>|" \
    "$WORK/src/res/values/strings.xml"
fi

echo "[apk] assembling resources and smali (apktool)"
apktool if "$FRAMEWORK_RES" -p "$WORK/framework" >/dev/null
apktool b "$WORK/src" -p "$WORK/framework" -o "$WORK/unsigned.apk"

echo "[apk] aligning (zipalign)"
zipalign -f -p 4 "$WORK/unsigned.apk" "$WORK/aligned.apk"

if [ ! -f "$KEYSTORE" ]; then
  echo "[apk] generating debug keystore $KEYSTORE"
  keytool -genkeypair -noprompt -keystore "$KEYSTORE" -storepass android -keypass android \
    -alias androiddebugkey -keyalg RSA -keysize 2048 -validity 10000 \
    -dname "CN=omnidraft debug, O=omnidraft, C=US" >/dev/null 2>&1
fi

echo "[apk] signing (apksigner)"
apksigner sign --ks "$KEYSTORE" --ks-pass pass:android --key-pass pass:android \
  --ks-key-alias androiddebugkey --out "$APK" "$WORK/aligned.apk"
rm -f "$APK.idsig"

apksigner verify "$APK"
aapt dump badging "$APK" | grep -E "^(package|launchable-activity):"
echo "[apk] $APK"
