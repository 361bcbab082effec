"""Time to first token for turns 1..N of real multi-turn chats, cold context vs prefix reuse.

The conversations are held-out ShareGPT ones (``trainer.distill_data``: never trained on).  Each turn
sends the whole conversation so far (the dataset's own earlier answers as assistant messages, like a
chat app resending history); the cold run empties the KV cache first, the reused run keeps the
common prefix with the previous turn, as ``omnidraft serve`` does.  Both runs of a turn give the
first token through the same generator (target alone: TTFT is prefill + one pass).

    python -m omnidraft.bench.chat_ttft --conversations 6 --turns 5 --out results
"""

from __future__ import annotations

import argparse
import json
import logging
import statistics
import time
from pathlib import Path

from omnidraft.assets import models
from omnidraft.assets.corpora import sharegpt_conversations, sharegpt_heldout
from omnidraft.runtime.session import Session, Settings
from omnidraft.speculative.generator import GenerationParams

log = logging.getLogger(__name__)


def conversations(n: int, turns: int, max_chars: int = 600) -> list[list[dict]]:
    roles = {"human": "user", "gpt": "assistant"}
    out = []
    for conv in sharegpt_conversations():
        if not sharegpt_heldout(str(conv.get("id"))):
            continue
        msgs = [{"role": roles.get(t.get("from")), "content": str(t.get("value", ""))[:max_chars]}
                for t in conv["conversations"][: 2 * turns]]
        if len(msgs) == 2 * turns and all(m["role"] == ("user", "assistant")[i % 2] and m["content"].strip()
                                          for i, m in enumerate(msgs)):
            out.append(msgs)
        if len(out) >= n:
            break
    return out


def first_token_s(gen, messages: list[dict], reuse: bool) -> tuple[float, int, int]:
    """Seconds to the first generated token; prompt tokens; tokens kept from before."""
    t0 = time.perf_counter()
    prompt = gen.prompt_from_messages(messages)
    final = gen.generate(prompt, GenerationParams(max_tokens=1, reuse_prefix=reuse))
    return time.perf_counter() - t0, final.stats.prompt_tokens, final.stats.reused_tokens


def run(target: str, n: int, turns: int, threads: int) -> dict:
    session = Session(Settings(target=target, method="target", threads=threads, n_ctx=4096))
    gen = session.generator("target")
    rows = []
    try:
        for ci, conv in enumerate(conversations(n, turns)):
            for mode in ("cold", "reused"):
                gen.target.reset()
                for t in range(1, turns + 1):
                    msgs = conv[: 2 * t - 1]
                    secs, n_prompt, kept = first_token_s(gen, msgs, reuse=(mode == "reused"))
                    rows.append(dict(conv=ci, turn=t, mode=mode, ttft_s=secs, prompt_tokens=n_prompt,
                                     reused_tokens=kept))
                    # the app then generates the answer; here the dataset's answer stands in for it
                    if mode == "reused" and t < turns:
                        gen.generate(gen.prompt_from_messages(conv[: 2 * t]),
                                     GenerationParams(max_tokens=1, reuse_prefix=True))
    finally:
        session.close()
    return {"target": target, "threads": threads, "turns": turns, "rows": rows, "table": table(rows, turns)}


def table(rows: list[dict], turns: int) -> list[dict]:
    out = []
    for t in range(1, turns + 1):
        cold = [r["ttft_s"] for r in rows if r["turn"] == t and r["mode"] == "cold"]
        warm = [r["ttft_s"] for r in rows if r["turn"] == t and r["mode"] == "reused"]
        toks = [r["prompt_tokens"] for r in rows if r["turn"] == t and r["mode"] == "cold"]
        kept = [r["reused_tokens"] for r in rows if r["turn"] == t and r["mode"] == "reused"]
        if cold and warm:
            out.append(dict(turn=t, prompt_tokens=statistics.median(toks), reused_tokens=statistics.median(kept),
                            cold_s=statistics.median(cold), reused_s=statistics.median(warm),
                            ratio=statistics.median(cold) / max(statistics.median(warm), 1e-9)))
    return out


def markdown(res: dict) -> str:
    lines = [f"Target {res['target']}, {res['threads'] or 'all'} threads, medians over conversations", "",
             "| turn | prompt tokens | kept from the previous turn | TTFT cold | TTFT reused | cold / reused |",
             "|---|---|---|---|---|---|"]
    for r in res["table"]:
        lines.append(f"| {r['turn']} | {r['prompt_tokens']:.0f} | {r['reused_tokens']:.0f} | {r['cold_s']:.2f} s | "
                     f"{r['reused_s']:.2f} s | {r['ratio']:.1f}x |")
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="python -m omnidraft.bench.chat_ttft", description=__doc__,
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--target", default=models.QWEN_05B)
    p.add_argument("--conversations", type=int, default=6)
    p.add_argument("--turns", type=int, default=5)
    p.add_argument("--threads", type=int, default=0)
    p.add_argument("--out", default="results")
    args = p.parse_args(argv)
    logging.basicConfig(level=logging.INFO, format="%(levelname)s %(name)s: %(message)s")
    res = run(args.target, args.conversations, args.turns, args.threads)
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    stem = out / f"chat-ttft-{time.strftime('%Y%m%d-%H%M%S')}"
    stem.with_suffix(".json").write_text(json.dumps(res, indent=1))
    md = markdown(res)
    stem.with_suffix(".md").write_text(md + "\n")
    print(md)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
