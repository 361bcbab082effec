"""Issue 43 parts 2 and 3 from finished ``omnidraft adapt`` runs (their adapt.json): one JSON of figures per
scenario (the held-out curve against the control, where it first reached +5 and +10 points, its best point, the
slope at the end, the old domains before and after, and for a drift the second set's curve and its recovery) and one
plot per scenario, every run of it beside its control.

    python scripts/lab/adapt_curves.py OUT_DIR LABEL=RUN_DIR [LABEL=RUN_DIR ...]

RUN_DIR holds adapt.json (``adapt_device.sh wait``'s run-NAME/, unpacked).  Runs of one scenario (adapt.json's
config.scenario) share a JSON and a plot: ``OUT_DIR/SCENARIO.json`` and ``OUT_DIR/SCENARIO.png``.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

sys.path[:0] = [str(Path(__file__).resolve().parents[2] / "backend")]

from omnidraft.apps.adapt_report import summary  # noqa: E402

RECOVERED = 2.0  # points: "recovery to within 2 points of the pre-drift level" (issue 43 part 3)


def _pts(p: dict, control: dict) -> float:
    return round(100 * (p["acceptance"] - control["acceptance"]), 2)


def curve_figures(curve: list[dict], control: dict) -> dict:
    """Gains over the control at every point, first crossings of +5 and +10, best point, slope at the end."""
    pts = [p for p in curve if p["measured"]]
    gains = [{"prompts": p["prompts"], "version": p["version"], "acceptance": round(100 * p["acceptance"], 2),
              "tau": round(p["tau"], 4), "points": _pts(p, control),
              "tau_gain_pct": round(100 * (p["tau"] / control["tau"] - 1), 2)} for p in pts]
    best = max(gains, key=lambda g: g["points"])
    a, b = pts[-2], pts[-1]
    crossed = summary(pts, control, {}, [], 0.0, within=b["prompts"])["measured"]["crossed"]  # adapt's own reading
    return {"points": gains, "best": best, "crossed": crossed,
            "slope_at_end": {"from": a["prompts"], "to": b["prompts"],
                             "points_per_100": round(1e4 * (b["acceptance"] - a["acceptance"]) /
                                                     (b["prompts"] - a["prompts"]), 2)}}


def drift_figures(run: dict) -> dict:
    """The drift set's curve, and how many requests after the switch it took to come within RECOVERED points of
    its level before the stream began (its point at 0), and of its level at the switch."""
    d = run["drift"]
    at, curve = d["at"], [p for p in d["curve"] if p["measured"]]
    start = next(p for p in curve if p["prompts"] == 0)
    at_switch = next(p for p in curve if p["prompts"] == at)
    after = [p for p in curve if p["prompts"] > at]
    back = next((p["prompts"] - at for p in after if 100 * (start["acceptance"] - p["acceptance"]) <= RECOVERED),
                None)
    first = [p for p in run["curve"] if p["measured"]]
    first_at = next(p for p in first if p["prompts"] == at)
    return {"set": d["set"], "at": at, "curve": curve_figures(d["curve"], d["control"]),
            "control": round(100 * d["control"]["acceptance"], 2),
            "level_at_0": round(100 * start["acceptance"], 2), "level_at_switch": round(100 * at_switch["acceptance"], 2),
            "requests_after_switch_to_within_2_of_level_at_0": back,
            "first_set_at_switch": round(100 * first_at["acceptance"], 2),
            "first_set_at_end": round(100 * first[-1]["acceptance"], 2)}


def run_figures(label: str, run_dir: Path) -> dict:
    run = json.loads((run_dir / "adapt.json").read_text())
    cfg, updates = run["config"], run["updates"]
    out = {"label": label, "scenario": cfg["scenario"] or "default", "stream_set": Path(cfg["stream_set"]).stem,
           "requests": cfg["n_train"], "update": {k: cfg[k] for k in ("lora_rank", "lr", "epochs", "interval", "lam")},
           "control": {"acceptance": round(100 * run["control"]["acceptance"], 2), "tau": round(run["control"]["tau"], 4)},
           "curve": curve_figures(run["curve"], run["control"]),
           "old": {Path(name).stem: {"before": round(100 * p["before"]["acceptance"], 2),
                                     "after": round(100 * p["after"]["acceptance"], 2),
                                     "points": round(100 * (p["after"]["acceptance"] - p["before"]["acceptance"]), 2)}
                   for name, p in run["old"].items()},
           "slowest_update_s": max(u["train_s"] for u in updates),
           "slowest_publish_s": max(u.get("publish_s", u["export_s"]) + u.get("swap_s", 0.0) for u in updates),
           "updates": len(updates), "seconds": run["seconds"]}
    if run.get("drift"):
        out["drift"] = drift_figures(run)
    return out


def plot(runs: list[dict], path: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(7.5, 4.2))
    colors = iter(("tab:blue", "tab:green", "tab:orange", "tab:purple"))
    for r in runs:
        series = [(r["stream_set"], r["curve"], r["control"]["acceptance"])]
        if "drift" in r:
            d = r["drift"]
            series.append((Path(d["set"]).stem + " (drift set)", d["curve"], d["control"]))
            ax.axvline(d["at"], color="grey", lw=0.8)
        for name, c, control in series:
            color = next(colors)
            x = [p["prompts"] for p in c["points"]]
            ax.plot(x, [p["acceptance"] for p in c["points"]], "o-", color=color, label=f"{name}: {r['label']}")
            ax.axhline(control, ls="--", color=color, lw=0.8)
    ax.set_xlabel("stream requests seen")
    ax.set_ylabel("held-out acceptance (%), k = 4")
    ax.grid(alpha=0.3)
    ax.legend(fontsize=7)
    ax.set_title(f"{runs[0]['scenario']}: the shipped drafter -> Qwen2.5-Coder-0.5B q4_0_pure (dashed: control)",
                 fontsize=9)
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)


def main(argv: list[str]) -> None:
    out = Path(argv[0])
    out.mkdir(parents=True, exist_ok=True)
    by_scenario: dict[str, list[dict]] = {}
    for arg in argv[1:]:
        label, run_dir = arg.split("=", 1)
        r = run_figures(label, Path(run_dir))
        by_scenario.setdefault(r["scenario"], []).append(r)
        c = r["curve"]
        print(f"{r['scenario']} [{label}]: control {r['control']['acceptance']} %; "
              + ", ".join(f"{p['prompts']}: {p['acceptance']} ({p['points']:+.1f})" for p in c["points"])
              + f"; best {c['best']['points']:+.1f} at {c['best']['prompts']}; crossed {c['crossed']}; old "
              + ", ".join(f"{k} {v['before']} -> {v['after']}" for k, v in r["old"].items()))
        if "drift" in r:
            d = r["drift"]
            print(f"  drift {Path(d['set']).stem} at {d['at']}: level at 0 {d['level_at_0']}, at switch "
                  f"{d['level_at_switch']}, back within 2 points after "
                  f"{d['requests_after_switch_to_within_2_of_level_at_0']} requests; first set "
                  f"{d['first_set_at_switch']} at switch -> {d['first_set_at_end']} at end")
    for scenario, runs in by_scenario.items():
        (out / f"{scenario}.json").write_text(json.dumps(runs, indent=1))
        plot(runs, out / f"{scenario}.png")


if __name__ == "__main__":
    main(sys.argv[1:])
