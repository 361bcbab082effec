"""Peak RSS of a generation at 2k context, the product against plain llama-cpp-python (issue 41, memory).

    python scripts/lab/peak_rss.py --upstream /tmp/upstream --out results/issue41/rss.json

Each configuration runs in its own child process (`omnidraft generate --n-ctx 2048` as a user runs it, the
default drafter included; plain llama-cpp-python's `Llama(n_ctx=2048)` with the upstream build first on
PYTHONPATH), on a prompt of about 1,000 tokens cut from a stdlib source file, 32 new tokens.  The child's peak
RSS comes from the kernel's accounting of that child (`os.wait4`), so nothing of this process counts.  The goal
is the issue's: the files' sizes + 25 % + the KV cache.
"""
from __future__ import annotations

import argparse
import inspect
import json
import os
import subprocess
import sys
from pathlib import Path

PROMPT_CHARS = 3600  # about 1,000 Qwen tokens of Python source


def prompt() -> str:
    import textwrap  # a stdlib module: present everywhere, held out from nothing that matters for memory

    return inspect.getsource(textwrap)[:PROMPT_CHARS]


def child_peak_mb(cmd: list[str], env: dict) -> tuple[float, int]:
    proc = subprocess.Popen(cmd, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
    _, status, usage = os.wait4(proc.pid, 0)
    err = proc.stderr.read()
    rc = os.waitstatus_to_exitcode(status)
    if rc != 0:
        raise SystemExit(f"{' '.join(cmd[:4])}... failed (rc {rc}):\n{err[-2000:]}")
    return usage.ru_maxrss / 1024.0, rc


def kv_mb(path: str, n_ctx: int, bytes_per: int) -> float:
    from gguf import GGUFReader

    fields = GGUFReader(path).fields
    arch = bytes(fields["general.architecture"].parts[-1]).decode()
    get = lambda key: int(fields[f"{arch}.{key}"].parts[-1][0])
    head_dim = get("embedding_length") // get("attention.head_count")
    return 2 * get("block_count") * n_ctx * get("attention.head_count_kv") * head_dim * bytes_per / 2**20


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--targets", default="qwen2.5-coder-1.5b,qwen2.5-coder-0.5b,qwen2.5-coder-1.5b:q4_0_pure")
    ap.add_argument("--upstream", default="", help="plain llama-cpp-python (pip --target DIR) for the peer rows")
    ap.add_argument("--n-ctx", type=int, default=2048)
    ap.add_argument("--out", type=Path, default=None)
    args = ap.parse_args()
    from omnidraft.assets import models
    from omnidraft.runtime import formats, wideprobe
    from omnidraft.runtime.settings import Settings

    text, rows = prompt(), []
    omni = [sys.executable, "-c", "from omnidraft.apps.cli import main; main()"]
    for target in args.targets.split(","):
        path = str(formats.target_file(target))  # what generate loads (a registry name: maybe its wide copy)
        if formats.measures_wide(target):  # or the file this machine's timing chose (runtime.wideprobe)
            path = str(wideprobe.kept_file(Settings(target=target), models.cache_dir() / "state") or path)
        draft = str(models.resolve(Settings().draft))
        files_mb = (os.path.getsize(path) + os.path.getsize(draft)) / 2**20
        ctx = ["--n-ctx", str(args.n_ctx), "--draft-n-ctx", str(args.n_ctx)]
        mb, _ = child_peak_mb(omni + ["generate", "--target", target, *ctx, "--max-tokens", "32", text],
                              dict(os.environ))
        # KV: f16 in the fast mode, f32 in the exact one (the target); the drafter's is small beside it
        kv = kv_mb(path, args.n_ctx, 4) + kv_mb(draft, args.n_ctx, 2)
        rows.append({"who": "omnidraft generate (default pair)", "target": target, "file": Path(path).name,
                     "files_mb": round(files_mb), "kv_mb_at_most": round(kv), "peak_rss_mb": round(mb),
                     "goal_mb": round(files_mb * 1.25 + kv), "met": mb <= files_mb * 1.25 + kv})
        if args.upstream:
            code = ("import sys; from llama_cpp import Llama; m = Llama(model_path=sys.argv[1], n_ctx=int(sys.argv[2]),"
                    " n_threads=os.cpu_count(), verbose=False); m.create_completion(sys.argv[3], max_tokens=32)")
            env = dict(os.environ, PYTHONPATH=args.upstream)
            plain = str(models.resolve(target))  # the file the user has
            mb, _ = child_peak_mb([sys.executable, "-c", "import os; " + code, plain, str(args.n_ctx), text], env)
            rows.append({"who": "plain llama-cpp-python (target alone)", "target": target,
                         "file": Path(plain).name, "files_mb": round(os.path.getsize(plain) / 2**20),
                         "peak_rss_mb": round(mb)})
    for r in rows:
        print(json.dumps(r))
    if args.out:
        args.out.parent.mkdir(parents=True, exist_ok=True)
        args.out.write_text(json.dumps({"n_ctx": args.n_ctx, "prompt_chars": len(text), "rows": rows}, indent=1))


if __name__ == "__main__":
    main()
