"""Does the rate guard's kept verdict carry from one process to the next (issue 28)?

Each prompt runs as its own ``omnidraft generate --json`` process, as a user's commands would. The held-out
prompts are split in two halves, A and B, so that no round meets a prompt an earlier one cached (n-gram merges
are kept in the state directory too): the target alone on A and on B, then, over one fresh state directory,
the default generation on A (the first process: it measures the cost model and judges from nothing) and on B
(every process resumes the verdict ``guard.json`` and the cost model kept so far). Speeds are decode tokens over
decode seconds summed over a half's prompts (model loading excluded, as in ``bench run``).

    python scripts/lab/guard_resume.py TARGET PROMPTS OUT.json [--n 4] [--tokens 96] [--gpu-layers -1] [--threads 0]
        [--draft D]

PROMPTS is a set name or a snapshot .json (``assets.snapshot``); --n prompts a half; OUT.json gets the rounds,
OUT.md a table.
"""
from __future__ import annotations

import argparse
import json
import subprocess
import sys
import tempfile
from pathlib import Path

from omnidraft.assets.snapshot import load_set

# (label, method, half): the target alone first, so that its state (none) cannot depend on the drafting rounds
ROUNDS = (("target alone, A", "target", "A"), ("target alone, B", "target", "B"),
          ("default, fresh state, A", "", "A"), ("default, resumed, B", "", "B"))  # "": the product's default


def generate(prompt: str, chat: bool, method: str, state: Path, a: argparse.Namespace) -> dict:
    cmd = [sys.executable, "-m", "omnidraft.apps.cli", "generate", "--json", "--target", a.target,
           "--max-tokens", str(a.tokens), "--gpu-layers", str(a.gpu_layers), "--threads", str(a.threads),
           "--state-dir", str(state), *(["--method", method] if method else []),
           *(["--draft", a.draft] if a.draft else []), *(["--chat"] if chat else []), "-"]
    out = subprocess.run(cmd, input=prompt, capture_output=True, text=True, check=True).stdout
    return json.loads(out[out.index("{"):])


def run_round(label: str, method: str, items, state: Path, a: argparse.Namespace) -> dict:
    tokens, seconds, notes, texts = 0, 0.0, [], []
    for it in items:
        r = generate(it.prompt, it.chat, method, state, a)
        s = r["stats"]
        tokens += s["completion_tokens"]
        seconds += s["completion_tokens"] / s["tokens_per_s"] if s["tokens_per_s"] else 0.0
        notes.append(s.get("policy_note", ""))
        texts.append(r["text"])
    print(f"{label}: {tokens / seconds:.1f} tok/s", file=sys.stderr)
    return {"round": label, "method": method, "tokens": tokens, "seconds": seconds,
            "tokens_per_s": tokens / seconds, "policy_notes": notes, "texts": texts}


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("target")
    ap.add_argument("prompts", help="a prompt set name or a snapshot .json")
    ap.add_argument("out", type=Path)
    ap.add_argument("--n", type=int, default=4)
    ap.add_argument("--tokens", type=int, default=96)
    ap.add_argument("--gpu-layers", type=int, default=0)
    ap.add_argument("--threads", type=int, default=0)
    ap.add_argument("--draft", default="", help="drafter (default: the product's)")
    a = ap.parse_args()
    held = load_set(a.prompts).split("heldout")
    if len(held) < 2 * a.n:
        ap.error(f"{a.prompts} holds {len(held)} held-out prompts: --n {a.n} needs {2 * a.n}")
    halves = {"A": held[:a.n], "B": held[a.n:2 * a.n]}
    with tempfile.TemporaryDirectory(prefix="guard-resume-") as tmp:
        rounds = []
        for label, method, half in ROUNDS:
            state = Path(tmp) / ("state" if method != "target" else f"target-{half}")
            rounds.append(dict(run_round(label, method, halves[half], state, a), half=half))
        assert (Path(tmp) / "state" / "costmodel.json").exists(), "the default rounds kept no state"
    alone = {r["half"]: r for r in rounds if r["method"] == "target"}
    for r in rounds:
        r["against_target"] = r["tokens_per_s"] / alone[r["half"]]["tokens_per_s"]
        r["same_output_as_target"] = r["texts"] == alone[r["half"]]["texts"]
    res = {"target": a.target, "prompts": a.prompts, "n": a.n, "tokens": a.tokens, "gpu_layers": a.gpu_layers,
           "threads": a.threads, "rounds": rounds}
    a.out.parent.mkdir(parents=True, exist_ok=True)
    a.out.write_text(json.dumps(res, indent=1))
    lines = [f"`{a.target}`, 2 x {a.n} prompts of `{a.prompts}` x {a.tokens} tokens, one process a prompt, "
             f"gpu_layers {a.gpu_layers}, threads {a.threads}", "",
             "| round | tok/s | against the target alone | same output | policy notes |", "|---|---|---|---|---|"]
    for r in rounds:
        notes = "; ".join(sorted({n for n in r["policy_notes"] if n})) or "-"
        lines.append(f"| {r['round']} | {r['tokens_per_s']:.1f} | {r['against_target']:.2f}x | "
                     f"{'yes' if r['same_output_as_target'] else 'NO'} | {notes} |")
    a.out.with_suffix(".md").write_text("\n".join(lines) + "\n")
    print("\n".join(lines))
    return 0


if __name__ == "__main__":
    sys.exit(main())
