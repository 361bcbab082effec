"""The offline sweep behind ``omnidraft adapt``'s update settings (issue 26; BENCHMARKS.md, Adaptation).

Two steps, each one process under the machine's CPU lock:

    python scripts/lab/adapt_lab.py records --out /tmp/lab --n-stream 64      # the target's records, once
    python scripts/lab/adapt_lab.py train --out /tmp/lab --configs full-1e-4,lora32-2e-4 --interval 16

``records`` generates (greedy; the text, and so each record, is the target's whichever drafter drafts) the
JavaScript stream's records, the held-out records of JavaScript, Python code and chat, and the replay pool
(Python code and chat from the stream splits), as JSON lines.  ``train`` replays the stream into the
trainer's own update code (``trainer.update.train_pass``), ``interval`` records an update, and after each
update scores the drafter on every held-out set by its teacher-forced top-1 agreement with the record's
labels (the token a greedy draft must hit to be accepted) and by the trainer's loss, in torch: seconds, not
an acceptance run.  The chosen point is then measured end to end by ``omnidraft adapt``.

``records --sets js-stream-long`` makes the same stream requests with the file's text before them (up to
``--long-chars``), as an editor would send them; ``train --stream js-stream-long`` trains on those.  Measured
(2026-11-27, full-1e-4-e2-p0.5-h1, interval 8): JavaScript held-out top-1 68.1 -> 70.9 % after 64 long requests
(559 drafter tokens of prompt each, updates 22-29 s) against 71.4 % after the short ones (188 tokens, 8-13 s):
three times the domain's text per request does not raise the gain.

Capacity is not the limit: streamed the held-out records themselves (js-stream.jsonl = js-heldout.jsonl twice),
the same settings reach 80.0 % after 32 prompts and 86.8 % after 64 (Python 75.4 %, chat 54.3 %); streamed other
files of the language, 71.4 %.  What an update learns carries over to unseen files only a little.
Nor much to unseen parts of files it saw: ``js-same-stream`` (first halves of 64 files) took ``js-same-heldout``
(second halves of 32 of them) from 65.1 to 68.7 % after 64 prompts, and the other files' js-heldout from 68.1 to
70.3 % in the same run (2026-11-27).

One user's own repository (``assets.repo_sets``): ``records --sets npm-stream,npm-heldout`` and ``train --stream
npm-stream`` stream prompts of npm's CLI repository and score its held-out files: 61.9 -> 67.1 % after 64 prompts
(full-1e-4-e2-p0.5-h1, interval 8); 128-token answers 66.5 %, lr 3e-4 65.5 %, prompt NLL 2 65.3 % (2026-11-27).
``train --errors`` says where a gain comes from: layout errors halve, identifiers and keywords stay wrong.
"""

from __future__ import annotations

import argparse
import copy
import json
import logging
import time
from dataclasses import replace
from pathlib import Path

SETS = {  # name -> (prompt set, split)
    "js-stream": ("javascript", "stream"), "js-heldout": ("javascript", "heldout"),
    "py-heldout": ("stdlib-code", "heldout"), "chat-heldout": ("chat", "heldout"),
    "py-replay": ("stdlib-code", "stream"), "chat-replay": ("chat", "stream"),
    "js-stream-long": ("javascript", "stream"),  # the same requests with the file's text before them (--long-chars)
    # one codebase: requests from the first half of each file, held out from the second half of the same files
    "js-same-stream": ("javascript", "same-stream"), "js-same-heldout": ("javascript", "same-heldout"),
    # one user's own repository (assets.repo_sets): npm's CLI, stream and held-out files split by file
    "npm-stream": ("npm-cli", "stream"), "npm-heldout": ("npm-cli", "heldout"),
}


def same_files(n_stream: int, n_heldout: int, seed: int = 0) -> dict[str, list]:
    """A user working in one codebase: a definition's opening from the first half of each of ``n_stream`` files
    (the stream's 'train' files) and, for the first ``n_heldout`` of them, one from the second half: held-out
    text never streamed (the halves do not overlap, the continuation included), from files that were."""
    import random

    from omnidraft.assets import corpora
    from omnidraft.assets.prompts import Item, _code_prompt

    files = [f for f in corpora.source_files() if f.lang == "javascript" and corpora.file_split(f) == "train"]
    rng = random.Random(f"same-files:{seed}")
    out: dict[str, list] = {"same-stream": [], "same-heldout": []}
    for f in rng.sample(files, len(files)):
        lines = (f.read() or "").splitlines(keepends=True)
        mid = len(lines) // 2
        halves = [_code_prompt("javascript", "".join(part), rng) for part in (lines[:mid], lines[mid:])]
        if not all(halves):
            continue
        out["same-stream"].append(Item(f"javascript:{f.name}:{halves[0][0] + 1}", halves[0][1], False, "stream"))
        if len(out["same-heldout"]) < n_heldout:
            out["same-heldout"].append(Item(f"javascript:{f.name}:{mid + halves[1][0] + 1}", halves[1][1], False,
                                            "heldout"))
        if len(out["same-stream"]) == n_stream:
            break
    return out


SETS_DEFAULT = ("js-stream", "js-heldout", "py-heldout", "chat-heldout", "py-replay", "chat-replay")


def with_file_prefix(item, chars: int):
    """The stream item as an editor would send it: the file's text before the prompt's end, its last ``chars``
    characters cut at a line start (the prompt itself whole).  The item's file is found by name and content."""
    from omnidraft.assets import corpora

    name = item.id.split(":")[1]
    for f in corpora.source_files():
        if f.lang == "javascript" and f.name == name and corpora.file_split(f) == "train":
            text = f.read() or ""
            end = text.find(item.prompt)
            if end < 0:
                continue
            end += len(item.prompt)
            start = max(0, end - max(chars, len(item.prompt)))
            start = text.rfind("\n", 0, start) + 1 if start else 0
            return text[start:end]
    return item.prompt


def cmd_records(args) -> None:
    from omnidraft.apps.adapt import answer_record
    from omnidraft.assets.snapshot import load_set
    from omnidraft.runtime.session import Session, Settings

    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    counts = {"js-stream": args.n_stream, "js-heldout": args.n_heldout, "py-heldout": args.n_heldout,
              "chat-heldout": args.n_heldout, "py-replay": args.n_replay, "chat-replay": args.n_replay,
              "js-stream-long": args.n_stream, "js-same-stream": args.n_stream, "js-same-heldout": args.n_heldout,
              "npm-stream": args.n_stream, "npm-heldout": args.n_heldout}
    same = same_files(args.n_stream, args.n_heldout) if "js-same" in args.sets else {}
    session = Session(Settings(target=args.target, draft=args.draft, threads=args.threads)).warm_up()
    try:
        for name in args.sets.split(","):
            n, (set_name, split) = counts[name], SETS[name]
            items = same[split][:n] if split in same else load_set(set_name).split(split)[:n]
            t0 = time.perf_counter()
            with open(out / f"{name}.jsonl", "w") as fh:
                for it in items:
                    text = with_file_prefix(it, args.long_chars) if name == "js-stream-long" else it.prompt
                    rec = answer_record(session, (text, it.chat), args.max_tokens, 8, "base")[1]
                    rec["prompt_item"] = it.id
                    fh.write(json.dumps(rec) + "\n")
            print(f"{name}: {len(items)} records in {time.perf_counter() - t0:.0f} s", flush=True)
    finally:
        session.close()


def read(path: Path) -> list[dict]:
    return [json.loads(x) for x in path.read_text().splitlines() if x.strip()]


def agreement(model, records: list[dict], lam: float) -> dict:
    """Teacher-forced top-1 agreement with the labels over every output position, and the hybrid loss."""
    import torch

    from omnidraft.trainer.loss import batch_from_record, output_loss

    hit = n = 0
    losses = []
    model.eval()
    with torch.no_grad():
        for rec in records:
            b = batch_from_record(rec)
            rows = model(input_ids=b.input_ids[None], logits_to_keep=b.pos).logits[0]
            hit += int((rows.argmax(-1) == b.labels).sum())
            n += len(b.labels)
            losses.append(output_loss(rows, b, lam)[1]["loss"])
    return {"top1": hit / max(n, 1), "positions": n, "loss": sum(losses) / max(len(losses), 1)}


def parse_config(spec: str, base):
    """'full-1e-4', 'full-1e-4-e2-p0.5-r0.5-l1', 'lora32-2e-4', '...-emb': mode, lr, epochs, prompt weight,
    replay ratio, lambda, trained embedding."""
    parts = spec.split("-")
    mode, lr = parts[0], float(parts[1] + ("-" + parts[2] if parts[1].endswith("e") else ""))
    rest = parts[3:] if parts[1].endswith("e") else parts[2:]
    cfg = replace(base, lora_rank=int(mode[4:]) if mode.startswith("lora") else 0, lr=lr)
    for p in rest:
        if p == "emb":
            cfg = replace(cfg, train_embeddings=True)
        elif p.startswith("e"):
            cfg = replace(cfg, epochs=int(p[1:]))
        elif p.startswith("p"):
            cfg = replace(cfg, prompt_lam=float(p[1:]))
        elif p.startswith("h"):  # hR: the newest 64 records of earlier updates, R steps per new record
            cfg = replace(cfg, recent=64, recent_ratio=float(p[1:]))
        elif p.startswith("l"):
            cfg = replace(cfg, lam=float(p[1:]))
        elif p.startswith("r"):
            cfg = replace(cfg, replay_ratio=float(p[1:]))
        else:
            raise ValueError(f"unknown config part {p!r} in {spec!r}")
    return cfg


def run_config(spec: str, base_model, data: dict, replay: list[dict], args) -> dict:
    import torch

    from omnidraft.trainer.model import merged
    from omnidraft.trainer.service import TrainerConfig
    from omnidraft.trainer.update import train_pass

    cfg = parse_config(spec, TrainerConfig(lam=args.lam, max_len=args.max_len))
    torch.manual_seed(0)
    model = copy.deepcopy(base_model)
    stream = data[args.stream][: args.n_stream]
    points = []
    for u in range(0, len(stream), args.interval):
        rows = list(enumerate(stream[u: u + args.interval], u))
        t0 = time.perf_counter()
        recent = stream[max(0, u - cfg.recent): u] if cfg.recent else []
        done = train_pass(model, rows, replay if cfg.replay_ratio > 0 else [], cfg, seed=u // args.interval + 1,
                          recent=recent)
        model = merged(done.model)
        secs = time.perf_counter() - t0
        pt = {"prompts": u + len(rows), "train_s": round(secs, 1), "steps": len(done.losses)}
        if pt["prompts"] % args.eval_every == 0 or pt["prompts"] >= len(stream):
            pt.update({k: agreement(model, v, cfg.lam) for k, v in data.items() if k.endswith("heldout")})
        points.append(pt)
        print(spec, _line(pt), flush=True)
    if args.errors:
        for name, recs in data.items():
            if name.endswith("heldout"):
                print(spec, name, json.dumps(error_classes(base_model, model, recs, args.draft)), flush=True)
    if args.save:
        from omnidraft.assets import models
        from omnidraft.trainer.export import export_gguf

        path = Path(args.save) / f"{spec}.gguf"
        export_gguf(model, path, models.resolve(args.draft), "q8_0", threads=args.threads)
        print(f"saved {path}", flush=True)
    return {"config": spec, "points": points}


def error_classes(before, after, records: list[dict], draft: str) -> dict:
    """Where an update's top-1 gain comes from: held-out label positions by class of the label token (layout:
    whitespace only; word: an identifier or keyword; other: punctuation, operators), each counted as fixed,
    broken, still wrong or right both times, and the most frequent fixed and still-wrong tokens."""
    import collections

    import torch

    from omnidraft.assets import models
    from omnidraft.llama.engine import Engine, EngineConfig
    from omnidraft.trainer.loss import batch_from_record

    vocab = Engine(models.resolve(draft), EngineConfig(vocab_only=True))
    counts: collections.Counter = collections.Counter()
    tokens = {"fixed": collections.Counter(), "still wrong": collections.Counter()}
    try:
        with torch.no_grad():
            for rec in records:
                b = batch_from_record(rec)
                got = [m.eval()(input_ids=b.input_ids[None], logits_to_keep=b.pos).logits[0].argmax(-1)
                       for m in (before, after)]
                for x, y, label in zip(got[0].tolist(), got[1].tolist(), b.labels.tolist()):
                    text = vocab.detokenize([label]).decode("utf-8", "replace")
                    cls = "layout" if not text.strip() else "word" if text.strip().isidentifier() else "other"
                    fate = {(False, True): "fixed", (True, False): "broken", (False, False): "still wrong"}.get(
                        (x == label, y == label), "right")
                    counts[f"{cls} {fate}"] += 1
                    if fate in tokens:
                        tokens[fate][text] += 1
    finally:
        vocab.close()
    return {"counts": dict(sorted(counts.items())), **{k: v.most_common(15) for k, v in tokens.items()}}


def cmd_accept(args) -> None:
    """Held-out acceptance and tau (``adapt.evaluate``: greedy, fixed k, frozen empty n-gram cache) per GGUF."""
    from omnidraft.apps.adapt import evaluate
    from omnidraft.assets import prompts
    from omnidraft.runtime.session import Session, Settings

    session = Session(Settings(target=args.target, draft=args.draft, threads=args.threads,
                               state_dir=str(Path(args.out) / "state"))).warm_up()
    empty = copy.deepcopy(session.pair.cache)
    sets = {name: [(i.prompt, i.chat) for i in prompts.load(name).split("heldout")[: args.n]]
            for name in args.sets.split(",")}
    try:
        for gguf in args.ggufs:
            session.load_drafter(gguf)
            for name, items in sets.items():
                ev = evaluate(session, items, args.max_tokens, args.k, empty)
                print(f"{Path(gguf).stem:32s} {name:12s} acceptance {100 * ev['acceptance']:.1f}% "
                      f"({ev['accepted']}/{ev['proposed']}) tau {ev['tau']:.3f} ({ev['seconds']:.0f} s)", flush=True)
    finally:
        session.close()


def _line(pt: dict) -> str:
    sets = " ".join(f"{k.removesuffix('-heldout')} {100 * v['top1']:.1f}% ({v['loss']:.3f})" for k, v in pt.items()
                    if isinstance(v, dict))
    return f"after {pt['prompts']:3d}: {sets}  [{pt['steps']} steps, {pt.get('train_s', 0)} s]"


def forward_kl(logits, topk_ids, topk_probs, rest):
    """KL(p || q') over the same coarse partition as the trainer's reverse KL (an experiment: --forward-kl)."""
    import torch

    from omnidraft.trainer.loss import EPS

    logq = torch.log_softmax(logits.float(), dim=-1)
    valid = topk_ids >= 0
    idx = topk_ids.clamp(min=0)
    p = topk_probs.clamp(min=EPS) * valid
    kl_s = (p * (torch.log(topk_probs.clamp(min=EPS)) - torch.gather(logq, 1, idx))).sum(-1)
    in_s = torch.zeros_like(logq).scatter_add(1, idx, valid.to(logq.dtype)) > 0
    logq_rest = torch.logsumexp(logq.masked_fill(in_s, float("-inf")), dim=-1)
    r = rest.clamp(min=EPS)
    return kl_s + r * (torch.log(r) - logq_rest)


def cmd_train(args) -> None:
    import torch

    from omnidraft.assets import models
    from omnidraft.trainer.model import load_gguf_model

    torch.set_num_threads(args.threads)
    if args.forward_kl:
        import omnidraft.trainer.loss as loss_mod

        loss_mod.dm_reverse_kl = forward_kl
    lab = Path(args.out)
    data = {name: read(lab / f"{name}.jsonl") for name in SETS if (lab / f"{name}.jsonl").is_file()}
    replay = data.pop("py-replay", []) + data.pop("chat-replay", [])
    data = {k: v for k, v in data.items() if k == args.stream or k.endswith("heldout")}
    base = load_gguf_model(models.resolve(args.draft))
    results = {"base": {k: agreement(base, v, args.lam) for k, v in data.items() if k.endswith("heldout")}}
    print("base", _line({"prompts": 0, "steps": 0, **results["base"]}), flush=True)
    results["runs"] = [run_config(spec, base, data, replay, args) for spec in args.configs.split(",")]
    path = lab / f"train-{time.strftime('%H%M%S')}.json"
    path.write_text(json.dumps({"args": vars(args), **results}, indent=1))
    print(f"wrote {path}")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    sub = ap.add_subparsers(dest="cmd", required=True)
    r = sub.add_parser("records")
    r.add_argument("--target", default="qwen2.5-coder-0.5b")
    r.add_argument("--n-stream", type=int, default=64)
    r.add_argument("--n-heldout", type=int, default=16)
    r.add_argument("--n-replay", type=int, default=16)
    r.add_argument("--max-tokens", type=int, default=64)
    r.add_argument("--sets", default=",".join(s for s in SETS if s in SETS_DEFAULT))
    r.add_argument("--long-chars", type=int, default=3000, help="js-stream-long: characters of the file per request")
    t = sub.add_parser("train")
    t.add_argument("--configs", default="lora32-2e-4,full-1e-4")
    t.add_argument("--interval", type=int, default=16)
    t.add_argument("--n-stream", type=int, default=64)
    t.add_argument("--stream", default="js-stream", choices=("js-stream", "js-stream-long", "js-same-stream", "npm-stream"))
    t.add_argument("--lam", type=float, default=0.2)
    t.add_argument("--eval-every", type=int, default=16, help="score the held-out sets every this many prompts")
    t.add_argument("--max-len", type=int, default=1024)
    t.add_argument("--forward-kl", action="store_true", help="experiment: forward KL in place of L_DM's reverse KL")
    t.add_argument("--errors", action="store_true", help="after each config, where its top-1 gain comes from "
                                                          "(error_classes) on every held-out set")
    t.add_argument("--save", default="", help="export each config's final drafter here (q8_0 GGUF)")
    a = sub.add_parser("accept")
    a.add_argument("ggufs", nargs="+")
    a.add_argument("--target", default="qwen2.5-coder-0.5b:q4_0_pure")
    a.add_argument("--sets", default="javascript,stdlib-code,chat")
    a.add_argument("--n", type=int, default=16)
    a.add_argument("--max-tokens", type=int, default=64)
    a.add_argument("-k", type=int, default=4)
    for p in (r, t, a):
        p.add_argument("--out", required=True)
        p.add_argument("--draft", default="smollm2-135m-d8-qwen")
        p.add_argument("--threads", type=int, default=2)
    args = ap.parse_args()
    logging.basicConfig(level=logging.WARNING)
    {"records": cmd_records, "train": cmd_train, "accept": cmd_accept}[args.cmd](args)


if __name__ == "__main__":
    main()
