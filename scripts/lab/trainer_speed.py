"""Time one trainer update offline, on records a real stream stored, and say what it learned (issue 43).

    python scripts/lab/trainer_speed.py --records RECS --model GGUF [--new 32 --recent 32] [--profile cprofile|torch]
                                        [--save W.pt | --compare W.pt] [--out RESULT.json]

RECS is a trainer's ``inbox.sqlite`` (every row, in seq order) or a JSON-lines file of records.  The first ``--new``
records are the update's new ones, the next ``--recent`` its records of earlier updates (``recent`` in
``update.train_pass``), the next ``--replay`` its old-domain pool: the schedule ``omnidraft trainer serve`` runs at
the ``unseen-code`` device settings (32 new + 32 recent, 2 epochs: 128 steps; records after the new ones are
cycled from the first where the file holds too few) or at adapt's CPU default (8 new,
8 recent, 4 replay a pass: 40 steps).  The update is ``train_pass`` itself, then the merge the service does and the
service's finiteness check of the merged weights; each part is timed.  ``--save`` keeps the trained weights (the
trainable tensors before the merge) and the losses, ``--compare`` reads such a file and reports how far this run's
are from it: the check that a speed-up left the arithmetic alone.
"""

from __future__ import annotations

import argparse
import cProfile
import io
import json
import pstats
import sqlite3
import sys
import time
import zlib
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]


def _code_path(argv) -> None:
    """The code under test: this checkout's, or ``--code DIR`` (another checkout's backend/, for a before/after)."""
    code = argv[argv.index("--code") + 1] if "--code" in argv else str(ROOT / "backend")
    sys.path[:0] = [code, str(ROOT)]


def read_records(path: Path) -> list[dict]:
    if path.suffix == ".sqlite":
        db = sqlite3.connect(f"file:{path}?mode=ro", uri=True)
        return [json.loads(zlib.decompress(b)) for (b,) in db.execute("SELECT body FROM records ORDER BY seq")]
    return [json.loads(x) for x in path.read_text().splitlines() if x.strip()]


def trained_state(model) -> dict:
    """The trainable tensors by name (the LoRA deltas, or the fine-tuned layers), on the CPU."""
    return {n: p.detach().float().cpu().clone() for n, p in model.named_parameters() if p.requires_grad}


def compare(ref_path: Path, state: dict, losses: list[float]) -> dict:
    import torch

    ref = torch.load(ref_path)
    diffs = {n: float((state[n] - w).abs().max()) for n, w in ref["state"].items()}
    scale = max(float(w.abs().max()) for w in ref["state"].values())
    dl = [abs(a - b) for a, b in zip(losses, ref["losses"])]
    return {"same_names": set(diffs) == set(state), "max_abs_weight_diff": max(diffs.values()),
            "max_abs_weight": scale, "bitwise_equal": all(d == 0.0 for d in diffs.values()),
            "n_losses": [len(losses), len(ref["losses"])], "max_abs_loss_diff": max(dl) if dl else None,
            "mean_loss": [sum(losses) / len(losses), sum(ref["losses"]) / len(ref["losses"])]}


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--records", required=True, type=Path)
    ap.add_argument("--model", required=True, help="the drafter GGUF to train")
    ap.add_argument("--new", type=int, default=32)
    ap.add_argument("--recent", type=int, default=32)
    ap.add_argument("--replay", type=int, default=0)
    ap.add_argument("--lora-rank", type=int, default=16)
    ap.add_argument("--lr", type=float, default=1e-3)
    ap.add_argument("--epochs", type=int, default=2)
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--device", default="cpu")
    ap.add_argument("--precision", default="auto")
    ap.add_argument("--set", action="append", default=[], metavar="FIELD=VALUE",
                    help="any other TrainerConfig field (repeatable)")
    ap.add_argument("--profile", choices=["none", "cprofile", "torch"], default="none")
    ap.add_argument("--save", type=Path)
    ap.add_argument("--compare", type=Path)
    ap.add_argument("--out", type=Path)
    ap.add_argument("--code", help="backend/ directory to import omnidraft from (default: this checkout's)")
    a = ap.parse_args(argv)

    import torch

    from omnidraft.trainer.model import load_gguf_model, merged
    from omnidraft.trainer.service import TrainerConfig
    from omnidraft.trainer.update import finite, train_pass

    torch.set_num_threads(a.threads)
    recs = read_records(a.records)
    # the records after the new ones, cycled (from the first) where the file holds fewer than asked
    more = [recs[(a.new + i) % len(recs)] for i in range(a.recent + a.replay)]
    rows = [(i + 1, r) for i, r in enumerate(recs[: a.new])]
    recent, replay = more[: a.recent], more[a.recent:]
    extra = {}
    for kv in a.set:
        k, v = kv.split("=", 1)
        extra[k] = type(getattr(TrainerConfig, k))(v) if not isinstance(getattr(TrainerConfig, k), bool) \
            else v.lower() in ("1", "true", "yes")
    cfg = TrainerConfig(lora_rank=a.lora_rank, lr=a.lr, epochs=a.epochs, device=a.device, precision=a.precision,
                        threads=a.threads, **extra)
    t = {}
    t0 = time.perf_counter()
    model = load_gguf_model(a.model)
    t["load_s"] = time.perf_counter() - t0
    torch.manual_seed(0)  # the LoRA adapter's initialisation
    t0 = time.perf_counter()
    model.to(a.device)
    prof = None
    if a.profile == "cprofile":
        prof = cProfile.Profile()
        prof.enable()
    elif a.profile == "torch":
        prof = torch.profiler.profile(activities=[torch.profiler.ProfilerActivity.CPU]
                                      + ([torch.profiler.ProfilerActivity.CUDA] if a.device != "cpu" else []))
        prof.__enter__()
    done = train_pass(model, rows, replay, cfg, seed=1, recent=recent)
    if a.device != "cpu":
        torch.cuda.synchronize()
    t["train_pass_s"] = time.perf_counter() - t0
    if a.profile == "cprofile":
        prof.disable()
    elif a.profile == "torch":
        prof.__exit__(None, None, None)
    state = trained_state(done.model)
    t0 = time.perf_counter()
    plain = merged(done.model).to("cpu")
    t["merge_s"] = time.perf_counter() - t0
    t0 = time.perf_counter()
    ok = finite(plain.parameters())
    t["finite_merged_s"] = time.perf_counter() - t0
    res = {"model": a.model, "records": str(a.records), "new": len(rows), "recent": len(recent),
           "replay": len(replay), "steps": len(done.losses), "bad": done.bad, "discard": done.discard,
           "finite": ok, "config": {k: getattr(cfg, k) for k in ("lora_rank", "lr", "epochs", "precision",
                                                                  "prompt_lam", "lam", "max_len", "device")},
           "extra": extra, "threads": torch.get_num_threads(), "torch": torch.__version__,
           "code": sys.modules["omnidraft.trainer.update"].__file__,
           "mean_loss": sum(done.losses) / max(len(done.losses), 1),
           "step_s": t["train_pass_s"] / max(len(done.losses), 1),
           "tokens": sum(len(r["prompt_ids"]) + len(r["output_ids"]) for _, r in rows), **t}
    if a.compare:
        res["compare"] = compare(a.compare, state, done.losses)
    if a.save:
        torch.save({"state": state, "losses": done.losses}, a.save)
    print(json.dumps({k: (round(v, 3) if isinstance(v, float) else v) for k, v in res.items()}, indent=1))
    if a.profile == "cprofile":
        s = io.StringIO()
        pstats.Stats(prof, stream=s).sort_stats("tottime").print_stats(30)
        print(s.getvalue())
        s = io.StringIO()
        pstats.Stats(prof, stream=s).sort_stats("cumtime").print_stats(45)
        print(s.getvalue())
    elif a.profile == "torch":
        print(prof.key_averages().table(sort_by="self_cpu_time_total", row_limit=40))
    if a.out:
        a.out.write_text(json.dumps({**res, "losses": done.losses}, indent=1) + "\n")
    return 0


if __name__ == "__main__":
    _code_path(sys.argv)
    raise SystemExit(main())
