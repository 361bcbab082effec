"""T(n) of one file through two llama.cpp builds, one process per build and round, alternated: what a kernel change
does to the product's Engine on a VM whose pace drifts (a build is a directory holding a ``llama_cpp`` package,
e.g. a copy of .venv's taken before `make setup` rebuilt it; the other is the .venv's own).

    cp -r .venv/lib/python3.11/site-packages/llama_cpp /tmp/before/   # before the rebuild
    .venv/bin/python scripts/lab/build_ab.py --before /tmp/before --file qwen2.5-coder-1.5b --rounds 5 \\
        --out results/.../engine-ab.jsonl

Each process decodes a short code prompt, then times passes of n tokens at its end (rolled back after each), and
prints one JSON line: the median ms for every n.  The summary takes the median over rounds.  ``--ctx N`` reads N
tokens of stdlib source first (8 a pass, as the product reads prompts; ``fa_rows_ab.py``'s text), so that the passes
attend to a long context.
"""

import argparse
import json
import os
import statistics
import subprocess
import sys
import time

from decode_t1 import PROMPT, engines  # the same prompt and fast-mode engine as the in-process comparisons
from fa_rows_ab import context_tokens, read  # fa_rows_ab's context, read as it reads it


def child(file: str, ns: list[int], passes: int, ctx: int) -> None:
    import llama_cpp

    (e,) = engines([file], ("fast",), n_ctx=max(ctx + 64, 1024)).values()
    if ctx:  # the context, 8 tokens a pass; the timed passes take the tokens that follow it
        toks = context_tokens(e, ctx)
        read(e, toks, 0, ctx)
    else:
        toks = e.tokenize(PROMPT)
        e.decode(toks)
    at = ctx or len(toks)
    src = toks[at:] if ctx else toks  # a short prompt's passes reuse its own tokens
    times: dict[int, list[float]] = {n: [] for n in ns}
    for r in range(passes):
        for n in ns:
            t = time.perf_counter()
            e.decode(src[r % 7: r % 7 + n], "all")
            times[n].append(time.perf_counter() - t)
            e.rollback(at)
    print(json.dumps({"build": os.path.dirname(llama_cpp.__file__),
                      **{f"T({n})": round(statistics.median(v) * 1e3, 2) for n, v in times.items()}}))


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--before", help="directory holding the other build's llama_cpp package (required)")
    ap.add_argument("--file", default="qwen2.5-coder-1.5b", help="model name or .gguf path (fast mode)")
    ap.add_argument("--n", default="1,2,4,8", help="pass sizes")
    ap.add_argument("--passes", type=int, default=40, help="timed passes per n and process")
    ap.add_argument("--rounds", type=int, default=5)
    ap.add_argument("--ctx", type=int, default=0, help="tokens of context the passes attend to (0: a short prompt)")
    ap.add_argument("--out", help="JSON lines, one per process")
    ap.add_argument("--child", action="store_true", help=argparse.SUPPRESS)
    a = ap.parse_args()
    ns = [int(x) for x in a.n.split(",")]
    if a.child:
        return child(a.file, ns, a.passes, a.ctx)
    if not a.before:
        ap.error("--before is required")
    rows = []
    for r in range(a.rounds):
        builds = (("before", a.before), ("after", ""))
        for label, path in builds if r % 2 == 0 else builds[::-1]:  # A B, then B A: the VM's drift evens out
            env = dict(os.environ, PYTHONPATH=path)
            cmd = [sys.executable, __file__, "--child", "--file", a.file, "--n", a.n, "--passes", str(a.passes),
                   "--ctx", str(a.ctx)]
            out = subprocess.run(cmd, env=env, capture_output=True, text=True, check=True)
            rows.append({"label": label, "round": r, **json.loads(out.stdout.strip().splitlines()[-1])})
            print(json.dumps(rows[-1]), flush=True)
    for label in ("before", "after"):
        med = {f"T({n})": statistics.median(x[f"T({n})"] for x in rows if x["label"] == label) for n in ns}
        print(label, "medians over rounds (ms):", med)
    if a.out:
        with open(a.out, "w") as f:
            f.writelines(json.dumps(x) + "\n" for x in rows)


if __name__ == "__main__":
    main()
