"""Issue 43's curves from what `scripts/device/adapt_device.sh wait` brought back (one folder per run, holding
``run-NAME.log``, ``run-NAME/trainer.log`` and ``run-NAME/trainer/registry/heldout.json``): a JSON per run (the
held-out points and the control, each update's time, the gains against the control, the slope at the end) and one
plot per scenario (curve(s) and control), into results/issue43/.  The runs need not have finished: heldout.json
holds every evaluation made so far.

    python scripts/lab/issue43_report.py DIR [OUT_DIR]     DIR holds code/, code-dm/, chat/ (the unpacked .tgz)

A DIR that holds chat-full/ (the fifth session: chat/ with LoRA rank 16 at lr 1e-3, chat-full/ with full
fine-tuning at lr 1e-4, both on 1 H200) gives NAME-h200.json per run and unseen-chat-lora-vs-full-h200.png.

A DIR that holds any of the settings' variants (code-lr3e5/, code-ep1/, code-recent256/, code-lora/: the fourth
session's runs on 2 H200s, why the code curve fell) gives variant-NAME-h200x2.json per run and one plot of them all,
unseen-code-variants-h200x2.png, so that the earlier session's files are not overwritten.

A DIR that holds code-r64/ or code-lr3e3/ (results/issue43/device-rank, 2026-12-02: code, rank 16 at lr 1e-3, beside
rank 64 at lr 1e-3 and rank 16 at lr 3e-3, 256 requests each at once on 1 H200) gives rank-NAME-h200.json per run
and one plot of the three, unseen-code-rank-h200.png.

A DIR whose code/ or chat/ curve goes past 256 requests (the sixteenth session, 2026-12-02: both with the scenarios'
LoRA update, rank 16 at lr 1e-3, to 512 requests at once on 1 H200) gives unseen-NAME-512-h200.json per run and
unseen-NAME-512-h200.png per scenario; each JSON also carries the adapt summary and every update's export, check
and swap times (adapt.json), where the run finished.

A DIR that holds code-long/ or code-long-lr5e4/ (results/issue43/device-long, 2026-12-02: the stdlib-code-long stream,
1,000 distinct prompts, so 512 requests never repeat one; rank 16 at lr 1e-3 and at 5e-4, at once on 1 H200) gives
long-NAME-h200.json per run (with a straight-line fit of tau from 128 requests on) and unseen-code-long-h200.png, with
the sixteenth session's code curve on stdlib-code (which cycles from request 299) beside them where
results/issue43/device-512 holds it.

A DIR whose code-long/ curve goes past 512 requests (results/issue43/device-stream, 2026-12-02, nineteenth session:
code-long alone on 1 H200 with the faster trainer update, N_TRAIN=1000, as far as the device time went) gives
stream-code-long-h200.json (with the fit from 128 on) and unseen-code-long-stream-h200.png, with the eighteenth
session's 512-request code-long curve (results/issue43/device-long, two runs sharing the GPU) beside it.

A DIR that holds chat-xl-mb4/ or drift-mb4/ (results/issue43/device-xl, 2026-12-05: chat to 1,500 requests over
chat-xl beside the drift run, four records a step, at once on one lent GPU; a third argument names the card, h100 by
default) gives xl-NAME-CARD.json per run (chat: fits from 128 and from 512 on; drift: both sets' curves and controls,
each point's figures from the stream's n-gram cache, the old domains, goal 3's recovery figures with and without the
cache), unseen-chat-xl-CARD.png (beside the twentieth session's chat-long-mb4) and drift-domain-mb4-CARD.png.
results/issue43/device-drift (2026-12-05) holds drift-mb4 alone, to its 512 requests on a lent H100.

results/issue43/device-1000 (2026-12-06: code-long-mb4 and chat-long-mb4 again, on an H100, their drafters kept)
gives rep-NAME-h100.json per run and unseen-code-1000-twice.png / unseen-chat-1000-twice.png, each beside the
twentieth session's run.

A DIR that holds code-long-mb4-1.5b/ or chat-long-mb4-1.5b/ (results/issue43/device-1.5b, 2026-12-07: the same two
streams served by the 1.5B Q4_K_M, on an H100, their drafters kept) gives t15-NAME-h100.json per run and
unseen-code-1.5b-h100.png / unseen-chat-1.5b-h100.png (curve and control).

A DIR that holds code-long-mb4/, chat-long-mb4/ or code-long-mb4-dm/ (results/issue43/device-mb4, twentieth session:
four records a step at lr 2e-3) gives mb4-NAME-h200.json per run (with the fit from 128 on),
unseen-code-mb4-h200.png (beside the one-record-a-step code-long curve) and unseen-chat-mb4-h200.png (beside the
fifth session's chat curve).
"""

from __future__ import annotations

import json
import re
import sys
from pathlib import Path

UPDATE = re.compile(r"update (\d+) published as (v\d+): loss ([\d.]+) -> ([\d.]+), (\d+) steps in ([\d.]+) s, "
                    r"export\+check ([\d.]+) s")
RUNS = {  # name -> (scenario, loss, label)
    "code": ("unseen-code", "L_DM + 0.2 L_N-gram (+ 0.5 prompt NLL)", "L_DM + 0.2 L_N-gram"),
    "code-dm": ("unseen-code", "L_DM alone (--lam 0; + 0.5 prompt NLL)", "L_DM alone (--lam 0)"),
    "chat": ("unseen-chat", "L_DM + 0.2 L_N-gram (+ 0.5 prompt NLL)", "L_DM + 0.2 L_N-gram"),
    # the fourth session: one setting changed from `code` each (full fine-tuning, lr 1e-4, 2 epochs, recent 64)
    "code-lr3e5": ("unseen-code", "L_DM + 0.2 L_N-gram (+ 0.5 prompt NLL)", "lr 3e-5"),
    "code-ep1": ("unseen-code", "L_DM + 0.2 L_N-gram (+ 0.5 prompt NLL)", "1 epoch"),
    "code-recent256": ("unseen-code", "L_DM + 0.2 L_N-gram (+ 0.5 prompt NLL)", "recent 256 (all history)"),
    "code-lora": ("unseen-code", "L_DM + 0.2 L_N-gram (+ 0.5 prompt NLL)", "LoRA rank 16, lr 1e-3"),
    # the fifth session: the chat stream with the scenarios' update now (`chat`: LoRA 16, lr 1e-3) and the old one
    "chat-full": ("unseen-chat", "L_DM + 0.2 L_N-gram (+ 0.5 prompt NLL)", "full FT, lr 1e-4 (the old update)"),
    # results/issue43/device-rank: the scenario's LoRA (rank 16, lr 1e-3) against a larger rank and a larger rate
    "code-r64": ("unseen-code", "L_DM + 0.2 L_N-gram (+ 0.5 prompt NLL)", "LoRA rank 64, lr 1e-3"),
    "code-lr3e3": ("unseen-code", "L_DM + 0.2 L_N-gram (+ 0.5 prompt NLL)", "LoRA rank 16, lr 3e-3"),
    # results/issue43/device-long: a stream that does not repeat (stdlib-code-long), the default step and a smaller one
    "code-long": ("unseen-code", "L_DM + 0.2 L_N-gram (+ 0.5 prompt NLL)", "stdlib-code-long, r16, lr 1e-3"),
    "code-long-lr5e4": ("unseen-code", "L_DM + 0.2 L_N-gram (+ 0.5 prompt NLL)", "stdlib-code-long, r16, lr 5e-4"),
    # results/issue43/device-mb4: four records a step at lr 2e-3, both streams to 1,000, and L_DM alone to 512
    "code-long-mb4": ("unseen-code", "L_DM + 0.2 L_N-gram (+ 0.5 prompt NLL)", "4 records a step, lr 2e-3"),
    "chat-long-mb4": ("unseen-chat", "L_DM + 0.2 L_N-gram (+ 0.5 prompt NLL)", "4 records a step, lr 2e-3"),
    "code-long-mb4-dm": ("unseen-code", "L_DM alone (--lam 0; + 0.5 prompt NLL)", "4 a step, lr 2e-3, L_DM alone"),
    # results/issue43/device-xl: chat to 1,500 requests over chat-xl, and the drift run with the LoRA default
    "chat-xl-mb4": ("unseen-chat", "L_DM + 0.2 L_N-gram (+ 0.5 prompt NLL)", "chat-xl, 4 a step, lr 2e-3"),
    "drift-mb4": ("drift-domain", "L_DM + 0.2 L_N-gram (+ 0.5 prompt NLL)", "JavaScript (streamed 1-256)"),
    # results/issue43/device-1.5b: code-long-mb4 and chat-long-mb4 served by the 1.5B Q4_K_M (37th session)
    "code-long-mb4-1.5b": ("unseen-code", "L_DM + 0.2 L_N-gram (+ 0.5 prompt NLL)", "served by the 1.5B Q4_K_M"),
    "chat-long-mb4-1.5b": ("unseen-chat", "L_DM + 0.2 L_N-gram (+ 0.5 prompt NLL)", "served by the 1.5B Q4_K_M"),
}
TARGET15 = ("code-long-mb4-1.5b", "chat-long-mb4-1.5b")
XL = ("chat-xl-mb4", "drift-mb4")
WHEN = {"device-xl": "2026-12-05", "device-drift": "2026-12-05"}  # the xl mode's folders, when they ran
REF_MB4_CHAT = Path("results/issue43/device-mb4/mb4-chat-long-mb4-h200.json")  # chat-long to 1,000, 4 a step
MICRO = ("code-long-mb4", "chat-long-mb4", "code-long-mb4-dm")
VARIANTS = ("code-lr3e5", "code-ep1", "code-recent256", "code-lora")
RANKS = ("code-r64", "code-lr3e3")
LONGS = ("code-long", "code-long-lr5e4")
REF_512 = Path("results/issue43/device-512/unseen-code-512-h200.json")  # stdlib-code, cycling from request 299
REF_LONG = Path("results/issue43/device-long/long-code-long-h200.json")  # stdlib-code-long to 512, two runs at once
WHERE_CHAT = ("lent GPU machine: 1 NVIDIA H200 + 16-core host (the 2-GPU kind was not lent); generation fully "
              "offloaded (CUDA build of llama-cpp-python 0.3.36), the trainer's steps on the GPU, export + check on "
              "the host CPU; chat and chat-full at once on the one GPU (2026-11-28, fifth session)")
WHERE = ("lent GPU machine: 1 NVIDIA H200 + 16-core host; generation fully offloaded (CUDA build of "
         "llama-cpp-python 0.3.36), the trainer's steps on the GPU, export + check on the host CPU; the three "
         "runs at once on the one GPU (2026-11-28)")
WHERE_512 = ("lent GPU machine: 1 NVIDIA H200 + 16-core host; generation fully offloaded (CUDA build of "
             "llama-cpp-python 0.3.36), the trainer's steps on the GPU, export + check on the host CPU; code and chat "
             "at once on the one GPU, N_TRAIN=512, --checkpoints 64,128,256,384,512 (2026-12-02, sixteenth session)")
LORA = "LoRA rank 16, lr 1e-3 (the scenarios' update)"
WHERE_RANK = ("lent GPU machine: 1 NVIDIA H200 + 16-core host; generation fully offloaded (CUDA build of "
              "llama-cpp-python 0.3.36), the trainer's steps on the GPU, export + check on the host CPU; code, "
              "code-r64 and code-lr3e3 at once on the one GPU, N_TRAIN=256, --checkpoints 64,128,192,256 (2026-12-02, "
              "results/issue43/device-rank)")
WHERE_LONG = ("lent GPU machine: 1 NVIDIA H200 + 16-core host; generation fully offloaded (CUDA build of "
              "llama-cpp-python 0.3.36), the trainer's steps on the GPU, export + check on the host CPU; code-long and "
              "code-long-lr5e4 at once on the one GPU, N_TRAIN=512, --checkpoints 64,128,256,384,512 (2026-12-02, "
              "results/issue43/device-long)")
WHERE_STREAM = ("lent GPU machine: 1 NVIDIA H200 + 16-core host; generation fully offloaded (CUDA build of "
                "llama-cpp-python 0.3.36), the trainer's steps on the GPU, export + check on the host CPU; code-long alone "
                "on the GPU, N_TRAIN=1000, --checkpoints 64,128,256,512,640,768,1000, stopped by the device time after "
                "736 requests (2026-12-02, nineteenth session, results/issue43/device-stream)")
WHERE_MICRO = ("lent GPU machine: 1 NVIDIA H200 + 16-core host; generation fully offloaded (CUDA build of "
               "llama-cpp-python 0.3.36), the trainer's steps on the GPU, export + check on the host CPU; code-long-mb4 "
               "and chat-long-mb4 at once on the one GPU, N_TRAIN=1000, --checkpoints 64,128,256,512,768,1000, then "
               "code-long-mb4-dm alone, N_TRAIN=512, --checkpoints 64,128,256,384,512 (2026-12-02, twentieth session, "
               "results/issue43/device-mb4)")
REF_STREAM = Path("results/issue43/device-stream/stream-code-long-h200.json")  # one record a step, to 640
REF_CHAT = Path("results/issue43/device-chat/chat-h200.json")  # one record a step, LoRA r16 lr 1e-3, to 256
WHERE_X2 = ("lent GPU machine: 2 NVIDIA H200s + 32-core host; generation fully offloaded (CUDA build of "
            "llama-cpp-python 0.3.36), the trainer's steps on the GPU, export + check on the host CPU; five runs "
            "at once: code, code-ep1 and code-lora on GPU 0, code-lr3e5 and code-recent256 on GPU 1 (2026-11-28)")


def load_run(folder: Path, name: str, where: str = WHERE) -> dict:
    points = json.loads((folder / f"run-{name}" / "trainer" / "registry" / "heldout.json").read_text())
    curve = [p for p in points if p["kind"] == "curve"]
    control = next(p for p in points if p["kind"] == "control")
    updates = [dict(zip(("update", "version", "loss_before", "loss_after", "steps", "train_s", "export_check_s"),
                        (int(m[1]), m[2], float(m[3]), float(m[4]), int(m[5]), float(m[6]), float(m[7]))))
               for m in UPDATE.finditer((folder / f"run-{name}" / "trainer.log").read_text())]
    log = (folder / f"run-{name}.log").read_text()
    seen = max((int(m) for m in re.findall(r"^prompt +(\d+) ", log, re.M)), default=0)
    scenario, loss, _ = RUNS[name]
    gains = [{"prompts": p["prompts"], "version": p["version"],
              "acceptance_points": round(100 * (p["acceptance"] - control["acceptance"]), 2),
              "tau_gain_pct": round(100 * (p["tau"] / control["tau"] - 1), 2)} for p in curve]
    a, b = curve[-2], curve[-1]
    slope = {"from": a["prompts"], "to": b["prompts"],
             "acceptance_points_per_100": round(100 * 100 * (b["acceptance"] - a["acceptance"]) /
                                                (b["prompts"] - a["prompts"]), 2),
             "tau_per_100": round(100 * (b["tau"] - a["tau"]) / (b["prompts"] - a["prompts"]), 4)}
    out = {"run": name, "scenario": scenario, "loss": loss, "where": where, "label": RUNS[name][2], "stream_prompts_seen": seen,
           "finished": "wrote" in log and "adapt.json" in log, "curve": curve, "control": control,
           "gains": gains, "slope_at_end": slope, "updates": updates,
           "goal": {"tau_gain_pct": 25.0, "speedup": 1.2}}
    done = folder / f"run-{name}" / "adapt.json"
    if done.is_file():  # a finished run: its summary, update config and each publish's export / check / swap times
        a = json.loads(done.read_text())
        out["summary"], out["config"] = a.get("summary"), a.get("config")
        out["publish"] = [{k: u.get(k) for k in ("update", "version", "train_s", "export_s", "swap_s", "publish_s")}
                          for u in a.get("updates", [])]
    return out


def gains_line(r: dict) -> str:
    """A run's gains over the control, one checkpoint after another, for the console."""
    return ", ".join(f"{x['prompts']}: {x['acceptance_points']:+.1f} pts / tau {x['tau_gain_pct']:+.1f} %"
                     for x in r["gains"])


def fit_from(curve: list[dict], start: int, goal: float) -> dict:
    """Least-squares line through tau at the checkpoints from ``start`` requests on: its slope per 100 requests and
    the request count where it reaches ``goal`` (None if it does not rise)."""
    pts = [(p["prompts"], p["tau"]) for p in curve if p["prompts"] >= start]
    mx, my = sum(x for x, _ in pts) / len(pts), sum(y for _, y in pts) / len(pts)
    slope = sum((x - mx) * (y - my) for x, y in pts) / sum((x - mx) ** 2 for x, _ in pts)
    return {"from": start, "points": len(pts), "tau_per_100": round(100 * slope, 4), "goal_tau": round(goal, 4),
            "reaches_goal_at": round(mx + (goal - my) / slope) if slope > 0 else None}


def plot(runs: list[dict], path: Path, title: str, legend: str = "lower right") -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, (ax1, ax2) = plt.subplots(1, 2, figsize=(9.5, 3.8))
    for r, color in zip(runs, ("tab:blue", "tab:green", "tab:orange", "tab:purple", "tab:brown")):
        x = [p["prompts"] for p in r["curve"]]
        label = r["label"] if r["label"] != RUNS[r["run"]][2] else RUNS[r["run"]][2] if r["run"] not in ("code",) or len(runs) < 3 else "full FT, lr 1e-4, 2 epochs (default)"
        ax1.plot(x, [100 * p["acceptance"] for p in r["curve"]], "o-", color=color, label=label)
        ax2.plot(x, [p["tau"] for p in r["curve"]], "s-", color=color, label=label)
    c = runs[0]["control"]
    ax1.axhline(100 * c["acceptance"], ls="--", color="grey", label="control: untrained, q8_0")
    ax2.axhline(c["tau"], ls="--", color="grey", label="control: untrained, q8_0")
    ax2.axhline(1.25 * c["tau"], ls=":", color="red", label="goal: control + 25 %")
    for ax, ylabel in ((ax1, "held-out acceptance (%)"), (ax2, "tokens per target pass (tau)")):
        ax.set_xlabel("stream requests seen")
        ax.set_ylabel(ylabel)
        ax.grid(alpha=0.3)
        ax.legend(fontsize=7, loc=legend)
    fig.suptitle(title, fontsize=9)
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)


def main(argv: list[str]) -> None:
    src = Path(argv[0])
    out = Path(argv[1]) if len(argv) > 1 else Path("results/issue43")
    out.mkdir(parents=True, exist_ok=True)
    variants = any((src / n).is_dir() for n in VARIANTS)
    ranks = any((src / n).is_dir() for n in RANKS)
    longs = any((src / n).is_dir() for n in LONGS)
    chat2 = (src / "chat-full").is_dir()
    if any((src / n).is_dir() for n in XL):
        return _xl(src, out, argv[2] if len(argv) > 2 else "h100")
    if src.name == "device-1000":
        return _repeat(src, out)
    if any((src / n).is_dir() for n in TARGET15):
        return _target15(src, out)
    if any((src / n).is_dir() for n in MICRO):
        return _micro(src, out)
    where = WHERE_X2 if variants else WHERE_RANK if ranks else WHERE_LONG if longs else WHERE_CHAT if chat2 else WHERE
    runs = {n: load_run(src / n, n, where) for n in RUNS if (src / n).is_dir()}
    stream = longs and any(p["prompts"] > 512 for r in runs.values() for p in r["curve"])
    if stream:
        return _stream(runs, out)
    if ranks and "code" in runs:
        runs["code"]["label"] = "LoRA rank 16, lr 1e-3 (the scenario's update)"
    for r in runs.values() if longs else ():  # where the curve from 128 on, as a line, reaches control + 25 %
        r["fit_from_128"] = fit_from(r["curve"], 128, 1.25 * r["control"]["tau"])
    long = not (variants or ranks or chat2 or longs) and \
        any(p["prompts"] > 256 for r in runs.values() for p in r["curve"])
    if long:
        for r in runs.values():
            r["where"], r["label"] = WHERE_512, LORA
    if chat2 and "chat" in runs:
        runs["chat"]["label"] = "LoRA rank 16, lr 1e-3 (the scenario's update now)"
    for name, r in runs.items():
        (out / (f"variant-{name}-h200x2.json" if variants else f"rank-{name}-h200.json" if ranks
                else f"long-{name}-h200.json" if longs
                else f"{name}-h200.json" if chat2
                else f"unseen-{name}-512-h200.json" if long else f"unseen-{name}-h200.json")).write_text(
            json.dumps(r, indent=1))
        g = gains_line(r)
        print(f"{name}: {r['stream_prompts_seen']} requests streamed; vs control {g}; slope {r['slope_at_end']}")
    pair = "\nSmolLM2-135M (never distilled) -> Qwen2.5-Coder-0.5B q4_0_pure; 1 H200; held-out k = 4 (5-row passes)"
    if variants:
        plot([runs[n] for n in ("code", *VARIANTS) if n in runs], out / "unseen-code-variants-h200x2.png",
             "unseen-code: one trainer setting changed at a time (stdlib stream, 32 HumanEval prompts held out)"
             + pair.replace("1 H200", "2 H200s"))
        return
    if ranks:
        plot([runs[n] for n in ("code", *RANKS) if n in runs], out / "unseen-code-rank-h200.png",
             f"unseen-code: the LoRA's rank and rate (stdlib stream, 32 HumanEval prompts held out){pair}", "best")
        return
    if longs:
        ref = json.loads(REF_512.read_text()) if REF_512.is_file() else None
        if ref:
            ref["label"] = "stdlib-code, cycles from 299 (r16, 1e-3; 16th session)"
        plot([runs[n] for n in LONGS if n in runs] + ([ref] if ref else []), out / "unseen-code-long-h200.png",
             f"unseen-code on a stream that does not repeat (stdlib-code-long; 32 HumanEval prompts held out){pair}")
        return
    if chat2:
        plot([runs[n] for n in ("chat", "chat-full") if n in runs], out / "unseen-chat-lora-vs-full-h200.png",
             f"unseen-chat: LoRA rank 16 at lr 1e-3 against full fine-tuning at lr 1e-4 (ShareGPT stream, 32 held out)"
             f"{pair}")
        return
    if long:
        for n, what in (("code", "stdlib stream, 32 HumanEval prompts held out"), ("chat", "ShareGPT stream, 32 held out")):
            if n in runs:
                plot([runs[n]], out / f"unseen-{n}-512-h200.png", f"unseen-{n}, {LORA}, 512 requests: {what}{pair}")
        return
    if "code" in runs:
        plot([runs[n] for n in ("code", "code-dm") if n in runs], out / "unseen-code-h200.png",
             f"unseen-code: stdlib stream, 32 HumanEval prompts held out{pair}")
    if "chat" in runs:
        plot([runs["chat"]], out / "unseen-chat-h200.png", f"unseen-chat: ShareGPT stream, 32 held out{pair}")


def _stream(runs: dict, out: Path) -> None:
    """The nineteenth session's one long code-long run, beside the eighteenth's 512-request one."""
    r = runs["code-long"]
    r["where"], r["label"] = WHERE_STREAM, "stdlib-code-long, r16, lr 1e-3: alone, to 736 (19th session)"
    r["fit_from_128"] = fit_from(r["curve"], 128, 1.25 * r["control"]["tau"])
    (out / "stream-code-long-h200.json").write_text(json.dumps(r, indent=1))
    g = gains_line(r)
    print(f"code-long: {r['stream_prompts_seen']} requests streamed; vs control {g}; slope {r['slope_at_end']}; "
          f"fit from 128 {r['fit_from_128']}")
    ref = json.loads(REF_LONG.read_text()) if REF_LONG.is_file() else None
    if ref:
        ref["label"] = "the same run to 512, beside a second one (18th session)"
    plot([r] + ([ref] if ref else []), out / "unseen-code-long-stream-h200.png",
         "unseen-code on stdlib-code-long, one stream alone, past 512 requests (32 HumanEval prompts held out)"
         "\nSmolLM2-135M (never distilled) -> Qwen2.5-Coder-0.5B q4_0_pure; 1 H200; held-out k = 4 (5-row passes)")


def _micro(src: Path, out: Path) -> None:
    """The twentieth session's runs with four records a step, beside the same streams at one record a step."""
    runs = {n: load_run(src / n, n, WHERE_MICRO) for n in MICRO if (src / n).is_dir()}
    for name, r in runs.items():
        r["fit_from_128"] = fit_from(r["curve"], 128, 1.25 * r["control"]["tau"])
        (out / f"mb4-{name}-h200.json").write_text(json.dumps(r, indent=1))
        g = gains_line(r)
        print(f"{name}: {r['stream_prompts_seen']} requests; vs control {g}; fit from 128 {r['fit_from_128']}")
    pair = "\nSmolLM2-135M (never distilled) -> Qwen2.5-Coder-0.5B q4_0_pure; 1 H200; held-out k = 4 (5-row passes)"
    refs = {}
    for key, path, label in (("code", REF_STREAM, "1 record a step, lr 1e-3 (19th session, to 640)"),
                             ("chat", REF_CHAT, "1 record a step, lr 1e-3 (5th session, to 256)")):
        if path.is_file():
            refs[key] = {**json.loads(path.read_text()), "label": label}
    code = [runs[n] for n in ("code-long-mb4", "code-long-mb4-dm") if n in runs] + \
        ([refs["code"]] if "code" in refs else [])
    if code:
        plot(code, out / "unseen-code-mb4-h200.png",
             f"unseen-code on stdlib-code-long: 4 records a step against 1 (32 HumanEval prompts held out){pair}")
    if "chat-long-mb4" in runs:
        plot([runs["chat-long-mb4"]] + ([refs["chat"]] if "chat" in refs else []), out / "unseen-chat-mb4-h200.png",
             f"unseen-chat on chat-long: 4 records a step against 1 (32 ShareGPT prompts held out){pair}")


def _repeat(src: Path, out: Path) -> None:
    """results/issue43/device-1000 (2026-12-06): code-long-mb4 and chat-long-mb4 run again to 1,000 on an H100, with
    --keep-drafters (their wall-clock on 2 cores: issue43_wallclock.py), beside the twentieth session's runs."""
    where = ("lent GPU machine: 1 NVIDIA H100 + 16-core host; generation fully offloaded (CUDA build of llama-cpp-python "
             "0.3.36), the trainer's steps on the GPU, export + check on the host CPU; code-long-mb4 and chat-long-mb4 "
             "at once on the one GPU, N_TRAIN=1000, --checkpoints 64,128,256,512,1000 --keep-drafters (2026-12-06, "
             f"{src})")
    pair = "\nSmolLM2-135M (never distilled) -> Qwen2.5-Coder-0.5B q4_0_pure; held-out k = 4 (5-row passes)"
    for name, scenario in (("code-long-mb4", "unseen-code"), ("chat-long-mb4", "unseen-chat")):
        if not (src / name).is_dir():
            continue
        r = load_run(src / name, name, where)
        r["label"] = "again, 1 H100 (2026-12-06)"
        r["fit_from_128"] = fit_from(r["curve"], 128, 1.25 * r["control"]["tau"])
        (out / f"rep-{name}-h100.json").write_text(json.dumps(r, indent=1))
        print(f"{name}: {r['stream_prompts_seen']} requests; vs control {gains_line(r)}; slope {r['slope_at_end']}; "
              f"fit from 128 {r['fit_from_128']}")
        ref_path = Path(f"results/issue43/device-mb4/mb4-{name}-h200.json")
        ref = {**json.loads(ref_path.read_text()), "label": "first run, 1 H200 (2026-12-02)"} if ref_path.is_file() \
            else None
        plot([r] + ([ref] if ref else []), out / f"{scenario}-1000-twice.png",
             f"{scenario} to 1,000 requests, twice (4 records a step, lr 2e-3){pair}")


def _target15(src: Path, out: Path) -> None:
    """results/issue43/device-1.5b (2026-12-07): the unseen streams to 1,000 served by the 1.5B Q4_K_M, the target
    their drafters' wall-clock is timed with on 2 cores, so that they learn its text rather than the 0.5B's."""
    where = ("lent GPU machine: 1 NVIDIA H100 + 16-core host; generation fully offloaded (CUDA build of llama-cpp-python "
             "0.3.36), the trainer's steps on the GPU, export + check on the host CPU; code-long-mb4-1.5b and "
             "chat-long-mb4-1.5b at once on the one GPU, N_TRAIN=1000, --checkpoints 64,128,256,512,1000 "
             f"--keep-drafters (2026-12-07, {src})")
    pair = "\nSmolLM2-135M (never distilled) -> Qwen2.5-Coder-1.5B Q4_K_M; 1 H100; held-out k = 4 (5-row passes)"
    for name, what in zip(TARGET15, ("stdlib-code-long stream, 32 HumanEval prompts", "chat-long stream, 32 ShareGPT "
                                     "prompts")):
        if not (src / name).is_dir():
            continue
        r = load_run(src / name, name, where)
        r["fit_from_128"] = fit_from(r["curve"], 128, 1.25 * r["control"]["tau"])
        (out / f"t15-{name}-h100.json").write_text(json.dumps(r, indent=1))
        print(f"{name}: {r['stream_prompts_seen']} requests; vs control {gains_line(r)}; slope {r['slope_at_end']}; "
              f"fit from 128 {r['fit_from_128']}")
        plot([r], out / f"{RUNS[name][0]}-1.5b-h100.png", f"{RUNS[name][0]} to 1,000 requests: {what} held out{pair}")


def _xl(src: Path, out: Path, card: str) -> None:
    """chat-xl-mb4 (chat to 1,500 requests over chat-xl) beside the twentieth session's chat-long-mb4, and drift-mb4
    (JavaScript for 256 requests, then French; each point also from the stream's n-gram cache)."""
    ran = [n for n in XL if (src / n).is_dir()]
    where = (f"lent GPU machine: 1 NVIDIA {card.upper()} + 16-core host; generation fully offloaded (CUDA build of "
             "llama-cpp-python 0.3.36), the trainer's steps on the GPU, export + check on the host CPU; "
             + (" and ".join(ran) + " at once on the one GPU" if len(ran) > 1 else f"{ran[0]} alone on the GPU")
             + f" ({WHEN.get(src.name, 'date in the folder README')}, {src})")
    pair = (f"\nSmolLM2-135M (never distilled) -> Qwen2.5-Coder-0.5B q4_0_pure; 1 {card.upper()}; held-out k = 4 "
            "(5-row passes)")
    if (src / "chat-xl-mb4").is_dir():
        r = load_run(src / "chat-xl-mb4", "chat-xl-mb4", where)
        r["fit_from_128"] = fit_from(r["curve"], 128, 1.25 * r["control"]["tau"])
        r["fit_from_512"] = fit_from(r["curve"], 512, 1.25 * r["control"]["tau"])
        (out / f"xl-chat-xl-mb4-{card}.json").write_text(json.dumps(r, indent=1))
        print(f"chat-xl-mb4: {r['stream_prompts_seen']} requests; vs control {gains_line(r)}; slope {r['slope_at_end']}; "
              f"fit from 128 {r['fit_from_128']}; from 512 {r['fit_from_512']}")
        ref = json.loads(REF_MB4_CHAT.read_text()) if REF_MB4_CHAT.is_file() else None
        if ref:
            ref["label"] = "chat-long to 1,000, 4 a step (20th session, H200)"
        plot([r] + ([ref] if ref else []), out / f"unseen-chat-xl-{card}.png",
             f"unseen-chat on chat-xl (2,000 distinct ShareGPT first turns) to 1,500 requests (32 held out){pair}")
    if (src / "drift-mb4").is_dir():
        d = drift_run(src / "drift-mb4", where)
        (out / f"xl-drift-mb4-{card}.json").write_text(json.dumps(d, indent=1))
        for key in ("curve", "drift"):
            line = ", ".join(f"{p['prompts']}: {100 * p['acceptance']:.1f} %"
                             + (f" / cache {100 * p['with_cache']['acceptance']:.1f} %" if "with_cache" in p else "")
                             for p in d[key])
            print(f"drift-mb4 {key} ({d['control'][key]['set']}, control {100 * d['control'][key]['acceptance']:.1f} "
                  f"%): {line}")
        print(f"drift-mb4 old domains: {d['old']}; {d['stream_prompts_seen']} requests")
        for which, r in d["recovery"].items():
            print(f"drift-mb4 recovery ({which}): {r}")
        drift_plot(d, out / f"drift-domain-mb4-{card}.png",
                   "drift-domain, the shipped drafter, LoRA r16, 4 a step, lr 2e-3, an update every 16 requests: "
                   f"JavaScript for 256 requests, then French\nheld-out 32 prompts each, k = 4, from an empty n-gram "
                   f"cache (solid) and from the stream's (dashed); 1 {card.upper()}")


def drift_run(folder: Path, where: str) -> dict:
    """A drift run's points: the streamed domain's curve, the drift set's, their controls, each point's figures from
    the stream's n-gram cache, the old domains before and after."""
    name = folder.name
    points = json.loads((folder / f"run-{name}" / "trainer" / "registry" / "heldout.json").read_text())
    log = (folder / f"run-{name}.log").read_text()
    keep = ("prompts", "version", "acceptance", "tau", "accepted", "proposed", "with_cache")
    controls = [p for p in points if p["kind"] == "control"]
    out = {"run": name, "scenario": "drift-domain", "where": where, "label": RUNS[name][2],
           "stream_prompts_seen": max((int(m) for m in re.findall(r"^prompt +(\d+) ", log, re.M)), default=0),
           "finished": "wrote" in log and "adapt.json" in log,
           "curve": [{k: p[k] for k in keep if k in p} for p in points if p["kind"] == "curve"],
           "drift": [{k: p[k] for k in keep if k in p} for p in points if p["kind"] == "drift"],
           "control": {"curve": controls[0], "drift": controls[1]} if len(controls) > 1 else {},
           "old": {}, "updates": [
               dict(zip(("update", "version", "loss_before", "loss_after", "steps", "train_s", "export_check_s"),
                        (int(m[1]), m[2], float(m[3]), float(m[4]), int(m[5]), float(m[6]), float(m[7]))))
               for m in UPDATE.finditer((folder / f"run-{name}" / "trainer.log").read_text())]}
    seen = 0
    for p in points:
        if p["kind"] == "old":
            when = "before" if p["prompts"] == 0 else "after"
            out["old"].setdefault(Path(p["set"]).stem, {})[when] = round(100 * p["acceptance"], 1)
            seen = max(seen, p["prompts"])
    for key in ("curve", "drift"):
        c = out["control"].get(key)
        for p in out[key]:
            if c:
                p["acceptance_points"] = round(100 * (p["acceptance"] - c["acceptance"]), 2)
                p["tau_gain_pct"] = round(100 * (p["tau"] / c["tau"] - 1), 2)
    out["recovery"] = {which: recovery(out, which) for which in ("plain", "with_cache")}
    done = folder / f"run-{name}" / "adapt.json"
    if done.is_file():
        a = json.loads(done.read_text())
        out["summary"], out["config"] = a.get("summary"), a.get("config")
        out["publish"] = [{k: u.get(k) for k in ("update", "version", "train_s", "export_s", "swap_s", "publish_s")}
                          for u in a.get("updates", [])]
    return out


def recovery(d: dict, which: str = "plain", at: int = 256, margin: float = 2.0) -> dict:
    """Goal 3's figures (acceptance points): the drift set's level before any stream (its 0 point) and at the switch
    ``at``; the first point after the switch within ``margin`` of that level and how many of the later points are; the
    first adaptation's length (requests until the streamed set's curve first came within ``margin`` of its level at
    the switch); the slope of a line through each set's points from the switch on; the streamed set's change from
    the switch to the end (an old domain by then).  ``which``: "plain" (an empty n-gram cache) or "with_cache"."""
    def acc(p):
        q = p if which == "plain" else p.get("with_cache")
        return None if q is None else 100 * q["acceptance"]

    def line(points):
        xs, ys = zip(*points)
        mx, my = sum(xs) / len(xs), sum(ys) / len(ys)
        return round(100 * sum((x - mx) * (y - my) for x, y in zip(xs, ys)) / sum((x - mx) ** 2 for x in xs), 2)

    curve = [(p["prompts"], acc(p)) for p in d["curve"] if acc(p) is not None]
    drift = [(p["prompts"], acc(p)) for p in d["drift"] if acc(p) is not None]
    if not curve or not drift or drift[-1][0] <= at:
        return {"measured": False}
    pre, at_switch = drift[0][1], dict(drift).get(at)
    after = [(n, a) for n, a in drift if n > at]
    within = [n for n, a in after if a >= pre - margin]
    level = dict(curve).get(at)
    first = next((n for n, a in curve if level is not None and a >= level - margin), None)
    return {"measured": True, "pre_drift": round(pre, 1), "at_switch": round(at_switch, 1) if at_switch else None,
            "after_switch": {n: round(a, 1) for n, a in after},
            "recovered_after": within[0] - at if within else None,
            "points_within": f"{len(within)} of {len(after)}",
            "first_adaptation": first, "streamed_at_switch": round(level, 1) if level is not None else None,
            "streamed_change_to_end": round(curve[-1][1] - level, 1) if level is not None else None,
            "slope_after_switch_points_per_100": {"drift": line([(n, a) for n, a in drift if n >= at]),
                                                  "streamed": line([(n, a) for n, a in curve if n >= at])}}


def drift_plot(d: dict, path: Path, title: str) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, (ax1, ax2) = plt.subplots(1, 2, figsize=(9.5, 3.8))
    for key, color, label in (("curve", "tab:blue", "JavaScript (streamed 1-256)"),
                              ("drift", "tab:orange", "French (streamed 257-512)")):
        pts = d[key]
        x = [p["prompts"] for p in pts]
        for ax, fig_of, mark in ((ax1, lambda p: 100 * p["acceptance"], "o"), (ax2, lambda p: p["tau"], "s")):
            ax.plot(x, [fig_of(p) for p in pts], mark + "-", color=color, label=label)
            wc = [(p["prompts"], fig_of(p["with_cache"])) for p in pts if p.get("with_cache", {}).get("measured")]
            if wc:
                ax.plot(*zip(*wc), mark + "--", color=color, alpha=0.6, label=f"{label.split(' ')[0]}, stream's cache")
            c = d["control"].get(key)
            if c:
                ax.axhline(fig_of(c), ls=":", color=color, alpha=0.7, label=f"{label.split(' ')[0]} control")
    for ax, ylabel in ((ax1, "held-out acceptance (%)"), (ax2, "tokens per target pass (tau)")):
        ax.axvline(256, color="grey", lw=0.8)
        ax.set_xlabel("stream requests seen")
        ax.set_ylabel(ylabel)
        ax.grid(alpha=0.3)
        ax.legend(fontsize=6, loc="best")
    fig.suptitle(title, fontsize=8)
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)


if __name__ == "__main__":
    main(sys.argv[1:])
