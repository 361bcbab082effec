"""The prompt sets of issue 43's scenarios as snapshot files (``assets.snapshot.load_set`` reads them), both splits,
for a machine that has neither the sets' sources (this machine's Python stdlib, HumanEval's wheel, ShareGPT) nor a
network: ``omnidraft adapt --stream-set DIR/stdlib-code.json --eval-set DIR/humaneval.json`` there streams the same
prompts as ``--stream-set stdlib-code --eval-set humaneval`` here.

``chat-long`` is ShareGPT's first user turns as ``chat`` takes them, with 1,000 stream prompts where ``chat`` has 40
(a 1,000-request stream of ``chat`` cycles its 40 twenty-five times); its held-out prompts are ``chat``'s.
``chat-xl`` is a draw of 2,000 stream prompts the same way (from a pool four times as large, so not a superset of
chat-long's: 271 are shared), for a stream past 1,000; the same held-out prompts.
``stdlib-code-long`` (``assets.prompts``) is stdlib-code with 1,000 distinct stream heads where it has 298; its
held-out prompts are stdlib-code's.

    python scripts/device/adapt_sets.py OUT_DIR [SET...]     (default: stdlib-code humaneval chat-long)
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

sys.path[:0] = [str(Path(__file__).resolve().parents[2] / "backend")]

import omnidraft  # noqa: E402,F401  (loads llama_cpp before numpy, as every entry point does)
from omnidraft.assets.prompts import Item, PromptSet  # noqa: E402
from omnidraft.assets.snapshot import load_set  # noqa: E402

LONG_CHAT = {"chat-long": 1000, "chat-xl": 2000}  # stream prompts


def chat_long(seed: int = 0, name: str = "chat-long") -> PromptSet:
    from omnidraft.assets.corpora import first_user_turns

    base = load_set("chat", seed)
    turns = first_user_turns(seed, LONG_CHAT[name], "stream")
    stream = [Item(f"chat-long:{cid}", text, True, "stream") for cid, text in turns]
    return PromptSet(name, base.version, base.source + f" ({LONG_CHAT[name]} stream prompts)", base.licence,
                     stream + base.split("heldout"))


def write(ps: PromptSet, out_dir: Path, seed: int = 0) -> Path:
    path = out_dir / f"{ps.name}.json"
    path.write_text(json.dumps({"name": ps.name, "version": ps.version, "source": ps.source, "licence": ps.licence,
                                "seed": seed, "items": [[i.id, i.prompt, i.chat, i.split] for i in ps.items]}))
    return path


def main(argv: list[str]) -> None:
    out = Path(argv[0])
    out.mkdir(parents=True, exist_ok=True)
    for name in argv[1:] or ["stdlib-code", "humaneval", "chat-long"]:
        ps = chat_long(name=name) if name in LONG_CHAT else load_set(name)
        path = write(ps, out)
        print(f"{path}: {len(ps.split('stream'))} stream, {len(ps.split('heldout'))} held-out prompts")


if __name__ == "__main__":
    main(sys.argv[1:])
