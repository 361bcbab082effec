#!/usr/bin/env bash
# Files larger than one device call carries (64 MiB with the work tree) reach the lent machine in parts.
#
#   here:  scripts/device/device_xfer.sh pack NAME FILE...   # .devxfer/NAME/part000.. (48 MiB each) + manifest
#   there: scripts/device/device_xfer.sh recv NAME           # one call per part: run(command=..., carry=
#                                                     #   [".devxfer/NAME/partNNN"]) keeps it in /tmp/xfer;
#                                                     #   one of the calls also carries .devxfer/NAME/manifest
#   there: scripts/device/device_xfer.sh join NAME DIR       # the files again, in DIR, each sha256 checked
# .devxfer/ is kept out of git (.git/info/exclude).
set -euo pipefail
cd "$(dirname "$0")/../.."
PART=${PART:-48M}  # the 64 MiB a call counts disk blocks: 8.9 MiB of tree + 56 MiB did not fit
STORE=/tmp/xfer

pack() {
  local name=$1; shift
  local dir=.devxfer/$name
  rm -rf "$dir" && mkdir -p "$dir"
  for f in "$@"; do
    printf '%s %s %s\n' "$(basename "$f")" "$(stat -c %s "$f")" "$(sha256sum "$f" | cut -d' ' -f1)"
  done > "$dir/manifest"
  cat "$@" | split -b "$PART" -a 3 -d - "$dir/part"
  ls "$dir" | grep -c '^part[0-9]\{3\}$' | xargs echo "parts:"
}

recv() {
  local name=$1
  mkdir -p "$STORE/$name"
  # parts carried by earlier calls may still lie in this tree: copy each once (a part's size is its identity here)
  for f in .devxfer/"$name"/*; do
    [ -f "$f" ] || continue
    [ "${f##*/}" != manifest ] && [ -f "$STORE/$name/${f##*/}" ] && [ "$(stat -c %s "$f")" = "$(stat -c %s "$STORE/$name/${f##*/}")" ] && continue
    cp "$f" "$STORE/$name/"
  done
  ls "$STORE/$name" | grep -c '^part[0-9]\{3\}$' | xargs echo "$name parts held:"
}

join_parts() {
  local name=$1 dest=$2
  local src="$STORE/$name" off=0
  mkdir -p "$dest"
  cat "$src"/part[0-9][0-9][0-9] > "$src/all"
  while read -r file size sum; do
    dd if="$src/all" of="$dest/$file" bs=4M iflag=skip_bytes,count_bytes skip="$off" count="$size" status=none
    echo "$sum  $dest/$file" | sha256sum -c --quiet - || { echo "$file: sha256 mismatch" >&2; exit 1; }
    off=$((off + size))
  done < "$src/manifest"
  rm -f "$src/all"
  echo "$name: joined into $dest"
}

case "${1:-}" in
  pack) shift; pack "$@" ;;
  recv) recv "$2" ;;
  join) join_parts "$2" "$3" ;;
  *) echo "usage: $0 pack NAME FILE... | recv NAME | join NAME DIR" >&2; exit 2 ;;
esac
