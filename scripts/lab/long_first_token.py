"""Long prompts against plain llama-cpp-python: time to the first token, then generation tok/s.

Each run a fresh process, the configurations alternated, the order reversed each round: `omnidraft generate --json
--max-tokens N` with the target alone and with the default (its first token timed from the request's start, its
tok/s over what follows), and plain llama-cpp-python as pip builds it (``--peer-path``, no patch) with all cores,
`create_completion` streamed (``bench.runner.PeerLlama``) and timed the same way.  The same GGUF for all; greedy.

    .venv/bin/python scripts/lab/long_first_token.py --peer-path /tmp/upstream --prompts DIR/p2k.txt --rounds 2 \\
        --out OUT.json
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
from pathlib import Path

from omnidraft.assets import models
from omnidraft.bench.report import write_json

sys.path.insert(0, str(Path(__file__).parent))
from long_context import run as product  # noqa: E402  (one `omnidraft generate --json` process a run)

# plain llama-cpp-python, run by the product's own peer (bench.runner.PeerLlama: all cores, streamed, its first token
# timed from the request and its tok/s over what follows, as `omnidraft generate` times them)
PEER = """
import json, sys
from omnidraft.assets.prompts import Item
from omnidraft.bench.runner import PeerLlama
from omnidraft.speculative.generator import GenerationParams
st = PeerLlama(sys.argv[1]).generate(Item("long", sys.stdin.read(), False, "heldout"),
                                     GenerationParams(max_tokens=int(sys.argv[2]))).stats
print(json.dumps({"first_token_s": st.first_token_s, "tok_s": st.tokens_per_s}))
"""
CONFIGS = ("target", "hybrid", "plain")  # the product's target alone, its default, plain llama-cpp-python


def plain(prompt: str, path: Path, a: argparse.Namespace) -> dict:
    env = dict(os.environ, PYTHONPATH=os.pathsep.join(p for p in (a.peer_path, os.environ.get("PYTHONPATH")) if p))
    out = subprocess.run([sys.executable, "-c", PEER, str(path), str(a.max_tokens)], input=prompt,
                         capture_output=True, text=True, check=True, env=env)
    return json.loads(out.stdout)


def table_of(runs: list[dict], prompts: list[Path]) -> list[str]:
    def mean(p: str, who: str, key: str) -> float:
        return statistics.mean(x[key] for x in runs if x["prompt"] == p and x["who"] == who)

    lines = ["| prompt | tokens | first token, s: target alone / default / plain | tok/s: target alone / default "
             "/ plain | default / plain, tok/s | plain / target alone, first token | default's text the target "
             "alone's |", "|---|---|---|---|---|---|---|"]
    for f in prompts:
        p = f.stem
        tokens = next(x["prompt_tokens"] for x in runs if x["prompt"] == p and x["who"] == "target")
        texts = {who: {x["text"] for x in runs if x["prompt"] == p and x["who"] == who} for who in ("target", "hybrid")}
        first = " / ".join(f"{mean(p, w, 'first_token_s'):.1f}" for w in CONFIGS)
        rate = " / ".join(f"{mean(p, w, 'tok_s'):.1f}" for w in CONFIGS)
        gain = mean(p, "hybrid", "tok_s") / mean(p, "plain", "tok_s")
        lines.append(f"| {p} | {tokens} | {first} | {rate} | {gain:.2f}x "
                     f"| {mean(p, 'plain', 'first_token_s') / mean(p, 'target', 'first_token_s'):.2f}x "
                     f"| {'yes' if texts['target'] == texts['hybrid'] and len(texts['target']) == 1 else 'NO'} |")
    return lines


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--peer-path", required=True, help="directory holding plain llama-cpp-python (pip --target)")
    ap.add_argument("--prompts", nargs="+", type=Path, required=True, help="raw-text prompt files")
    ap.add_argument("--target", default="qwen2.5-coder-1.5b")
    ap.add_argument("--rounds", type=int, default=2)
    ap.add_argument("--max-tokens", type=int, default=96)
    ap.add_argument("--state", help="a state dir every product run starts from a fresh copy of (default: the shared "
                    "one)")
    ap.add_argument("--out", type=Path, required=True)
    a = ap.parse_args()
    path = models.resolve(a.target)
    runs = []
    for r in range(a.rounds):
        for f in a.prompts:
            text = f.read_text()
            for who in (CONFIGS if r % 2 == 0 else CONFIGS[::-1]):
                res = plain(text, path, a) if who == "plain" else product(text, who, {}, [], a)
                runs.append({"round": r, "prompt": f.stem, "who": who, **res})
                print(json.dumps({k: v for k, v in runs[-1].items() if k != "text"}), flush=True)
    table = table_of(runs, a.prompts)
    print("\n".join(table))
    write_json(a.out, {"target": a.target, "file": str(path), "runs": runs, "table": table})


if __name__ == "__main__":
    main()
