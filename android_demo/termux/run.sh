#!/data/data/com.termux/files/usr/bin/bash
# Start the omnidraft server on this phone for the app (http://127.0.0.1:8080/app/).
#
#   bash ~/omnidraft/android_demo/termux/run.sh                  # 4 threads, default pair
#   OMNIDRAFT_THREADS=2 bash .../run.sh --n-ctx 2048              # extra flags go to `omnidraft serve`
set -euo pipefail

REPO="$(cd "$(dirname "$0")/../.." && pwd)"
VENV="${OMNIDRAFT_VENV:-$REPO/.venv}"
PORT="${OMNIDRAFT_PORT:-8080}"
# Threads = the big cores (most phones: 4 of 8).  More threads land on little cores and slow every step.
THREADS="${OMNIDRAFT_THREADS:-4}"

[ -x "$VENV/bin/omnidraft" ] || { echo "run.sh: run android_demo/termux/setup.sh first" >&2; exit 2; }
# Keep the CPU awake while the screen is off (needs the Termux:API app; harmless without it).
if command -v termux-wake-lock >/dev/null; then termux-wake-lock || true; fi

echo "omnidraft: open http://127.0.0.1:$PORT/app/ (or the omnidraft app); Ctrl-C stops"
exec "$VENV/bin/omnidraft" serve --port "$PORT" --threads "$THREADS" "$@"
