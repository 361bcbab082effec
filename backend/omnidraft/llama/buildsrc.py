"""The pinned llama-cpp-python sources with omnidraft's kernels put in (``patch/``), and the id of those kernels.

Part of build.py's job (setup's ``build.py source DIR``), kept apart to keep each module small.  Like build.py it
runs before omnidraft is installed, imported from build.py's folder: standard library only.
"""

from __future__ import annotations

import hashlib
import os
import shutil
import subprocess
import sys
import tarfile

VERSION = "0.3.36"
SDIST_SHA256 = "832db0699007f1be95a7e41ef12e88926b02ba836461e36a36372db2760c1a2e"
PATCH_DIR = os.path.join(os.path.dirname(os.path.abspath(__file__)), "patch")
GGML_CPU = os.path.join("vendor", "llama.cpp", "ggml", "src", "ggml-cpu")
# The patch: the kernels' own files, copied into ggml-cpu/, and the hooks that call them, in this order;
# then frhead.patch, which lets a drafter carry a head over its most frequent tokens (gguf_tools.frhead); then
# sbq6x8-hook.patch, which repacks Q6_K on x86 too (the fast mode) for sbq6x8.cpp; then q8k-hook.patch, which
# quantizes x86 Q8_K activations (every Q4_K and Q6_K product's) with AVX2 instead of ggml's scalar reference;
# then fa-hook.patch, which keeps flash attention's one-row decode on the path batched rows take, and takes passes
# of a few rows through fa_rows.cpp (blocks of the KV cache shared by their heads, sums vectorized).
KERNEL_FILES = ("sbq4.cpp", "sbq4.h", "sbk.cpp", "sbk.h", "sbkx8.cpp", "sbq6x8.cpp", "q8k.cpp", "fa_rows.cpp")
HOOKS = ("sbq4-hook.patch", "sbk-hook.patch", "sbkx8-hook.patch", "sbq4-arm-hook.patch", "frhead.patch",
         "sbq6x8-hook.patch", "q8k-hook.patch", "fa-hook.patch")
# patch_tree appends a function by this name, returning patch_id(), to the copied sbq4.cpp: how `check` tells a
# build made from these kernel sources from one made before they changed (a `git pull` that edits a kernel)
PATCH_ID_SYMBOL = "omnidraft_patch_id"


def _sha256(path: str) -> str:  # models.sha256_file's twin: this file runs before omnidraft is installed
    h = hashlib.sha256()
    with open(path, "rb") as f:
        for chunk in iter(lambda: f.read(1 << 20), b""):
            h.update(chunk)
    return h.hexdigest()


def _download_sdist(dest: str) -> str:
    name = os.path.join(dest, f"llama_cpp_python-{VERSION}.tar.gz")
    if os.path.isfile(name) and _sha256(name) != SDIST_SHA256:
        os.remove(name)  # a partial or foreign file: pip would keep it as "already downloaded"
    if not os.path.isfile(name):
        subprocess.run([sys.executable, "-m", "pip", "download", "-q", "--no-deps", "--no-binary", ":all:",
                        "-d", dest, f"llama-cpp-python=={VERSION}"], check=True)
    if _sha256(name) != SDIST_SHA256:
        raise SystemExit(f"{name}: sha256 differs from the pinned {SDIST_SHA256}")
    return name


def _apply(patch: str, tree: str) -> None:
    """Apply a unified diff with patch(1), or git apply where patch is missing."""
    if shutil.which("patch"):
        cmd = ["patch", "-p1", "--forward", "--quiet", "-i", patch]
    else:
        cmd = ["git", "apply", "-p1", patch]
    subprocess.run(cmd, cwd=tree, check=True)


def extract(sdist: str, dest: str) -> str:
    """A clean extract of the pinned sdist in ``dest`` (the patch applies once); the tree's path."""
    tree = os.path.join(dest, f"llama_cpp_python-{VERSION}")
    shutil.rmtree(tree, ignore_errors=True)
    with tarfile.open(sdist) as tar:
        tar.extractall(dest, filter="data")
    return tree


def patch_id() -> str:
    """A short hash of every kernel file and hook setup builds in, names included."""
    h = hashlib.sha256()
    for name in KERNEL_FILES + HOOKS:
        with open(os.path.join(PATCH_DIR, name), "rb") as f:
            h.update(name.encode() + b"\0" + f.read() + b"\0")
    return h.hexdigest()[:16]


def patch_tree(tree: str) -> None:
    """Put the kernels into an extracted source tree: their files, then the hooks, then the sources' id."""
    for name in KERNEL_FILES:
        shutil.copy(os.path.join(PATCH_DIR, name), os.path.join(tree, GGML_CPU, name))
    for name in HOOKS:
        _apply(os.path.join(PATCH_DIR, name), tree)
    with open(os.path.join(tree, GGML_CPU, "sbq4.cpp"), "a") as f:  # built on every platform the patch serves
        f.write(f'\n// appended by omnidraft/llama/build.py (patch_tree): the kernel sources this build came from\n'
                f'extern "C" const char * {PATCH_ID_SYMBOL}(void) {{ return "{patch_id()}"; }}\n')


def prepare_source(dest: str) -> str:
    """The pinned llama-cpp-python sources with the small-batch kernel, ready for ``pip install DIR``."""
    os.makedirs(dest, exist_ok=True)
    tree = extract(_download_sdist(dest), dest)
    patch_tree(tree)
    return tree
