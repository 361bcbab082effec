"""Carry drafters that differ a little from one base GGUF in few bytes, and get them back exactly.

Issue 43's long streams run on a lent GPU host; the drafters they publish (145 MB each at q8_0) are to be timed on
the 2-core CPU here, and what comes back from that host is 64 MiB a call.  A LoRA update moves most q8_0 values of
a block by a step or none, so each file minus the control (the same model re-exported the same way: the same
layout, byte for byte) is mostly zeros and ones, and xz packs that several times smaller than the file.

    pack   --base CONTROL --out DIR FILE...      DIR/<name>.xz (the byte-wise difference, or the whole file where
                                                 the sizes differ) and DIR/manifest.json (sizes, sha256s)
    unpack [--base CONTROL] --from DIR --out DIR2   every file of the manifest whose parts are there, checked
                                                 against its sha256 (a wrong base or a damaged part is an error, not
                                                 a file); the base may be a whole file of the same manifest

The base itself travels with ``pack --whole``.  Standard library and numpy only (the device's Python has both).
"""

from __future__ import annotations

import argparse
import hashlib
import json
import lzma
import sys
from concurrent.futures import ProcessPoolExecutor
from pathlib import Path

import numpy as np

PRESET = 3  # 20 MB of a +-1 difference: 1.8 s and 0.20 of its size; preset 6 took 27 s for 0.17


def _sha(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()


def _pack_one(base: str | None, path: str, out: str) -> dict:
    data = Path(path).read_bytes()
    ref = Path(base).read_bytes() if base else b""
    if ref and len(ref) == len(data):
        kind = "delta"
        payload = (np.frombuffer(data, np.uint8) - np.frombuffer(ref, np.uint8)).tobytes()  # mod 256
    else:
        kind = "whole"
        payload = data
    dst = Path(out) / (Path(path).name + ".xz")
    dst.write_bytes(lzma.compress(payload, preset=PRESET))
    return {"name": Path(path).name, "kind": kind, "size": len(data), "sha256": _sha(data),
            "base_sha256": _sha(ref) if kind == "delta" else None, "packed": dst.stat().st_size}


def pack(base: Path | None, files: list[Path], out: Path, jobs: int) -> list[dict]:
    out.mkdir(parents=True, exist_ok=True)
    with ProcessPoolExecutor(max(1, jobs)) as ex:
        entries = list(ex.map(_pack_one, [str(base) if base else None] * len(files), map(str, files),
                              [str(out)] * len(files)))
    manifest = out / "manifest.json"
    old = json.loads(manifest.read_text()) if manifest.is_file() else []
    names = {e["name"] for e in entries}
    manifest.write_text(json.dumps([e for e in old if e["name"] not in names] + entries, indent=1))
    for e in entries:
        print(f"{e['name']}: {e['kind']}, {e['size'] / 1e6:.1f} MB -> {e['packed'] / 1e6:.1f} MB, "
              f"sha256 {e['sha256'][:16]}", flush=True)
    return entries


def unpack(base: Path | None, src: Path, out: Path) -> list[Path]:
    """Whole files first: a control packed ``--whole`` beside its differences serves as their base, so
    ``--base`` is needed only where the base did not travel."""
    out.mkdir(parents=True, exist_ok=True)
    refs = {}
    if base:
        data = base.read_bytes()
        refs[_sha(data)] = data
    made = []
    for e in sorted(json.loads((src / "manifest.json").read_text()), key=lambda e: e["kind"] != "whole"):
        part = src / (e["name"] + ".xz")
        if not part.is_file():
            print(f"{e['name']}: not here, skipped", flush=True)
            continue
        payload = lzma.decompress(part.read_bytes())
        if e["kind"] == "delta":
            ref = refs.get(e["base_sha256"])
            if ref is None:
                raise SystemExit(f"{e['name']}: packed against base {e['base_sha256'][:16]}, which is neither --base "
                                 "nor a whole file here")
            payload = (np.frombuffer(payload, np.uint8) + np.frombuffer(ref, np.uint8)).tobytes()
        if len(payload) != e["size"] or _sha(payload) != e["sha256"]:
            raise SystemExit(f"{e['name']}: rebuilt file does not match its sha256 (damaged part?)")
        if e["kind"] == "whole":
            refs[e["sha256"]] = payload
        dst = out / e["name"]
        tmp = dst.with_suffix(".tmp")
        tmp.write_bytes(payload)
        tmp.replace(dst)
        made.append(dst)
        print(f"{e['name']}: {e['kind']}, sha256 {e['sha256'][:16]} ok", flush=True)
    return made


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    sub = ap.add_subparsers(dest="cmd", required=True)
    p = sub.add_parser("pack", help="pack FILEs as differences from --base (or whole with --whole)")
    p.add_argument("files", nargs="+", type=Path)
    p.add_argument("--base", type=Path)
    p.add_argument("--whole", action="store_true", help="pack the files whole (the base itself)")
    p.add_argument("--out", type=Path, required=True)
    p.add_argument("--jobs", type=int, default=8)
    u = sub.add_parser("unpack", help="rebuild the files of --from's manifest")
    u.add_argument("--base", type=Path)
    u.add_argument("--from", dest="src", type=Path, required=True)
    u.add_argument("--out", type=Path, required=True)
    a = ap.parse_args(argv)
    if a.cmd == "pack":
        if not a.whole and a.base is None:
            ap.error("pack needs --base (or --whole)")
        pack(None if a.whole else a.base, a.files, a.out, a.jobs)
    else:
        unpack(a.base, a.src, a.out)
    return 0


if __name__ == "__main__":
    sys.exit(main())
