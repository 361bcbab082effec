"""The small sweep behind ``omnidraft adapt``'s defaults (docs/BENCHMARKS-HISTORY.md section 2): lr x update interval.

One target session for the whole sweep.  The stream's records are generated once (greedy: the target's
text, and so every record's training signal, is the same whichever drafter drafted it), and every
point trains a fresh trainer on those records, ``interval`` at a time, exactly as ``adapt`` feeds it.
Each point is scored on the held-out prompts by

* the trainer's own hybrid loss on the held-out generations (torch, seconds), and
* held-out acceptance at a fixed draft length (``adapt.evaluate``: fixed k, frozen n-gram snapshot),

beside the base drafter and the control (untrained, re-exported the same way).

    python scripts/lab/adapt_sweep.py --out /tmp/sweep --threads 2 --lrs 1e-4,2e-4,5e-4 --intervals 8,16
"""

from __future__ import annotations

import argparse
import copy
import json
import logging
import time
from pathlib import Path

from omnidraft.assets import models
from omnidraft.apps.adapt import AdaptConfig, answer_record, evaluate, export_control, load_items
from omnidraft.online.rates import acceptance_text
from omnidraft.runtime.session import Session, Settings


def heldout_loss(model, records: list[dict], lam: float) -> float:
    import torch

    from omnidraft.trainer.loss import record_loss

    model.eval()
    with torch.no_grad():
        losses = [record_loss(model, r, lam)[1]["loss"] for r in records]
    return sum(losses) / len(losses)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--out", required=True)
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--lrs", default="1e-4,2e-4,5e-4")
    ap.add_argument("--intervals", default="8,16")
    ap.add_argument("--n-train", type=int, default=16)
    ap.add_argument("--n-heldout", type=int, default=4)
    ap.add_argument("--max-tokens", type=int, default=32)
    ap.add_argument("--eval-max-tokens", type=int, default=32)
    ap.add_argument("--eval-k", type=int, default=4)
    ap.add_argument("--qtype", default="q8_0")
    ap.add_argument("--no-accept", action="store_true", help="held-out loss only (no acceptance runs)")
    args = ap.parse_args()
    logging.basicConfig(level=logging.WARNING)
    from omnidraft.trainer.service import Trainer, TrainerConfig

    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    cfg = AdaptConfig(n_train=args.n_train, n_heldout=args.n_heldout, max_tokens=args.max_tokens,
                      eval_max_tokens=args.eval_max_tokens, eval_k=args.eval_k, qtype=args.qtype)
    settings = Settings(threads=args.threads, state_dir=str(out / "state"))
    train, heldout = load_items(cfg)
    t0 = time.perf_counter()
    session = Session(settings).warm_up()
    ngram0 = copy.deepcopy(session.pair.cache)
    ev = (heldout, cfg.eval_max_tokens, cfg.eval_k, ngram0)
    results: dict = {"config": vars(args), "points": []}

    def generate_records(items) -> list[dict]:
        return [answer_record(session, item, cfg.max_tokens, cfg.record_topk, "base")[1] for item in items]

    if not args.no_accept:
        results["base"] = evaluate(session, *ev)
        b = results["base"]
        print(f"base: {acceptance_text(b['accepted'], b['proposed'])} ({time.perf_counter() - t0:.0f} s)", flush=True)
    held_file = out / "heldout-records.json"  # the held-out prompts' generations, for a held-out loss
    if not held_file.exists():
        held_file.write_text(json.dumps(generate_records(heldout)))
    held_recs = json.loads(held_file.read_text())
    recs_file = out / "stream-records.json"
    if not recs_file.exists():
        recs_file.write_text(json.dumps(generate_records(train)))
    records = json.loads(recs_file.read_text())
    print(f"stream: {len(records)} records ({time.perf_counter() - t0:.0f} s)", flush=True)

    from omnidraft.trainer.model import load_gguf_model

    base = models.resolve(settings.draft)
    results["base_loss"] = heldout_loss(load_gguf_model(base), held_recs, cfg.lam)  # where training starts
    print(f"base held-out loss {results['base_loss']:.4f}", flush=True)
    if not args.no_accept:
        path, meta = export_control(str(base), cfg.qtype, out, args.threads)
        session.load_drafter(str(path))
        results["control"] = {**meta, **evaluate(session, *ev)}
        c = results["control"]
        print(f"control: {acceptance_text(c['accepted'], c['proposed'])} ({time.perf_counter() - t0:.0f} s)",
              flush=True)

    for lr in [float(x) for x in args.lrs.split(",")]:
        for interval in [int(x) for x in args.intervals.split(",")]:
            t1 = time.perf_counter()
            tr = Trainer(TrainerConfig(base=settings.draft, state_dir=str(out / f"lr{lr:g}-i{interval}"),
                                       interval=interval, lr=lr, lam=cfg.lam, lora_rank=cfg.lora_rank,
                                       qtype=cfg.qtype, threads=args.threads))
            updates, error = [], None
            for i in range(0, len(records), interval):
                tr.receive(records[i: i + interval])
                try:
                    m = tr.maybe_update()
                except Exception as e:  # noqa: BLE001 - a refused export is a result of the sweep
                    error = f"{type(e).__name__}: {e}"
                    break
                if m:
                    updates.append(m)
            pt = {"lr": lr, "interval": interval, "updates": len(updates), "error": error,
                  "train_s": sum(u["train_s"] for u in updates), "export_s": sum(u["export_s"] for u in updates),
                  "check_rel": [u["check"]["rel_error"] for u in updates],
                  "heldout_loss": heldout_loss(tr.model, held_recs, cfg.lam) if tr.model is not None else None}
            cur = tr.registry.current()
            if cur and not args.no_accept and error is None:
                session.load_drafter(str(cur[1]))
                pt.update(evaluate(session, *ev))
            pt["seconds"] = round(time.perf_counter() - t1, 1)
            results["points"].append(pt)
            acc = acceptance_text(pt["accepted"], pt["proposed"]) if "proposed" in pt else "-"
            print(f"lr {lr:g} interval {interval}: held-out loss {pt['heldout_loss']}, acceptance {acc}, "
                  f"{pt['seconds']:.0f} s, error {error}", flush=True)
            (out / "sweep.json").write_text(json.dumps(results, indent=1, default=str))
    session.close()
    print(f"total {time.perf_counter() - t0:.0f} s; wrote {out / 'sweep.json'}")


if __name__ == "__main__":
    main()
