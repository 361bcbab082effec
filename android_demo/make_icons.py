"""Draw the app and launcher icons as PNGs with nothing but zlib (no Pillow needed).

    python android_demo/make_icons.py        # rewrites app/icons/*.png and apk/src/res/mipmap-*/ic_launcher.png

The design: a dark green rounded square, a white ring (the target) and a bright green dot
(the drafter) that runs ahead of it.  Maskable icons keep everything inside the central 80 %.
"""

from __future__ import annotations

import math
import struct
import zlib
from pathlib import Path

HERE = Path(__file__).resolve().parent
BG, RING, DOT = (0x14, 0x4d, 0x2e), (0xff, 0xff, 0xff), (0x7c, 0xf0, 0xa4)


def _png(width: int, height: int, rows: list[bytes]) -> bytes:
    def chunk(tag: bytes, data: bytes) -> bytes:
        return struct.pack(">I", len(data)) + tag + data + struct.pack(">I", zlib.crc32(tag + data) & 0xFFFFFFFF)

    raw = b"".join(b"\x00" + r for r in rows)  # filter type 0 on every row
    return (b"\x89PNG\r\n\x1a\n" + chunk(b"IHDR", struct.pack(">IIBBBBB", width, height, 8, 6, 0, 0, 0))
            + chunk(b"IDAT", zlib.compress(raw, 9)) + chunk(b"IEND", b""))


def _cover(d: float) -> float:
    """Pixel coverage of an edge at signed distance d (pixels, negative inside): cheap anti-aliasing."""
    return min(1.0, max(0.0, 0.5 - d))


def draw(size: int, maskable: bool) -> bytes:
    s = size / 512.0
    corner = 0 if maskable else 96 * s          # maskable: full bleed, the launcher applies its own mask
    cx, cy = 256 * s, 256 * s
    ring_r, ring_w = 118 * s, 30 * s
    dot_x, dot_y, dot_r = 352 * s, 170 * s, 52 * s
    rows = []
    for y in range(size):
        row = bytearray()
        for x in range(size):
            px, py = x + 0.5, y + 0.5
            # rounded-square background
            qx, qy = max(abs(px - cx) - (256 * s - corner), 0), max(abs(py - cy) - (256 * s - corner), 0)
            bg_a = _cover(math.hypot(qx, qy) - corner) if corner else 1.0
            r, g, b = BG
            ring_a = _cover(abs(math.hypot(px - cx, py - cy) - ring_r) - ring_w / 2)
            r, g, b = (r + (RING[0] - r) * ring_a, g + (RING[1] - g) * ring_a, b + (RING[2] - b) * ring_a)
            dot_a = _cover(math.hypot(px - dot_x, py - dot_y) - dot_r)
            r, g, b = (r + (DOT[0] - r) * dot_a, g + (DOT[1] - g) * dot_a, b + (DOT[2] - b) * dot_a)
            row += bytes((round(r), round(g), round(b), round(255 * bg_a)))
        rows.append(bytes(row))
    return _png(size, size, rows)


TARGETS = {
    "app/icons/icon-192.png": (192, False),
    "app/icons/icon-512.png": (512, False),
    "app/icons/maskable-512.png": (512, True),
    "apk/src/res/mipmap-mdpi/ic_launcher.png": (48, False),
    "apk/src/res/mipmap-hdpi/ic_launcher.png": (72, False),
    "apk/src/res/mipmap-xhdpi/ic_launcher.png": (96, False),
    "apk/src/res/mipmap-xxhdpi/ic_launcher.png": (144, False),
    "apk/src/res/mipmap-xxxhdpi/ic_launcher.png": (192, False),
}


def main() -> None:
    for rel, (size, maskable) in TARGETS.items():
        path = HERE / rel
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_bytes(draw(size, maskable))
        print(f"{rel}: {size}x{size}")


if __name__ == "__main__":
    main()
