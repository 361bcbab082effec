#!/usr/bin/env bash
# Every device call carries the work tree (tracked + untracked-not-ignored files, counted in disk blocks,
# at most 64 MiB with what `carry` adds). The bundled drafter alone is 48 MiB of it, so a session of
# 48 MiB part calls (scripts/device/device_xfer.sh) takes it out of the index for the duration:
#   scripts/device/device_tree.sh light     untrack the bundled GGUFs and list them in .git/info/exclude (the files stay)
#   LIGHT_RESULTS=1 ... light               results/ too (27 of the tree's 30 MiB, 2026-12-06; no device script reads
#                                           it), so parts of 54 MiB fit: 9 calls for the 0.5B + SmolLM2 where 32 MiB took 15
#   scripts/device/device_tree.sh restore   track them again (run before any commit: a commit while light deletes them)
#   scripts/device/device_tree.sh size      MiB a call would carry now, before its carried paths
set -euo pipefail
cd "$(dirname "$0")/../.."
EXCLUDE=$(git rev-parse --git-path info/exclude)
bundled() {
  git ls-files 'models/*.gguf'
  if [ -n "${LIGHT_RESULTS:-}" ] && [ -n "$(git ls-files results | head -n 1)" ]; then echo results; fi
}

size() {
  git ls-files -co --exclude-standard -z | du -c -k --files0-from=- 2>/dev/null | tail -n 1 |
    awk '{printf "work tree a call carries: %.1f MiB (limit 64 with carried paths)\n", $1 / 1024}'
}

case "${1:-}" in
  light)
    files=$(bundled)
    [ -n "$files" ] || { echo "nothing bundled is tracked (already light?)"; size; exit 0; }
    for f in $files; do
      git rm -r -q --cached "$f"
      grep -qxF "/$f" "$EXCLUDE" 2>/dev/null || echo "/$f" >> "$EXCLUDE"
      echo "untracked for the session: $f"
    done
    size ;;
  restore)
    for line in $(grep -e '^/models/.*\.gguf$' -e '^/results$' "$EXCLUDE" 2>/dev/null || true); do
      f=${line#/}
      sed -i "\\#^/$f\$#d" "$EXCLUDE"
      # -f for the GGUFs (.gitignore lists *.gguf); results/ as usual, so that nothing ignored under it joins
      if [ -d "$f" ]; then git add "$f"; elif [ -f "$f" ]; then git add -f "$f"; else continue; fi
      echo "tracked again: $f"
    done
    size ;;
  size) size ;;
  *) sed -n '2,/^set /p' "$0" | grep '^#' >&2; exit 2 ;;
esac
