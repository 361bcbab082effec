"""Is the installed llama-cpp-python the build omnidraft needs?

The version the project pins, compiled without llamafile's tinyBLAS kernels: those take over matrix
products from 2 rows up and round differently from one-row decoding, which would make speculative
output differ from the target alone at near-ties.

Also run as a plain script by scripts/setup.sh and android_demo/termux/setup.sh, before omnidraft
itself is installed (so: standard library and llama_cpp only): exit 0 if the build is right, 1 if not.
"""

from __future__ import annotations

import ctypes
import glob
import os
import sys

VERSION = "0.3.36"


def has_llamafile() -> bool | None:
    """Whether the installed ggml CPU backend has llamafile kernels; None if its library is not found."""
    import llama_cpp

    libs = glob.glob(os.path.join(os.path.dirname(llama_cpp.__file__), "lib", "libggml-cpu.so"))
    return bool(ctypes.CDLL(libs[0]).ggml_cpu_has_llamafile()) if libs else None


def is_suitable() -> bool:
    import llama_cpp

    return llama_cpp.__version__ == VERSION and has_llamafile() is False


if __name__ == "__main__":
    sys.exit(0 if is_suitable() else 1)
