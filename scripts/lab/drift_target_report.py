"""Issue 43 part 3's target switch, both ways: the figures and one plot from two ``omnidraft adapt --scenario
drift-target`` runs (their adapt.json), one switching 0.5B -> 1.5B and one 1.5B -> 0.5B, both from the shipped
drafter on the same JavaScript stream.

A target moves every acceptance by itself (the static drafter keeps 39 % of its JavaScript drafts for the 0.5B, 31 %
for the 1.5B), so every point is read as its gain over the static drafter (the control) on the target in use, and
recovery is counted in those gains:

* the level before the switch: the gain at the switch on the first target;
* recovered: the first point on the new target whose gain is within ``--band`` points of that level;
* the first adaptation's time, to compare with: the first point on the first target within the band of it
  (both as ``omnidraft adapt`` prints them: ``apps.adapt_report.drift_recovery``).

Old domains: a run's "after" is read against the static drafter on its own last target. Runs since 2026-12-05's fix
measure that at the switch ("before", the first target's kept as "before_first_target"); in the two runs before it
"before" was the base drafter on the first target, so the other run's "before" stands in (both start from the same
drafter).

    python scripts/lab/drift_target_report.py FWD/adapt.json REV/adapt.json OUT_DIR [--card h100]
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path

from omnidraft.apps.adapt_report import drift_recovery


def _gain(point: dict, control: dict) -> float:
    return 100 * (point["acceptance"] - control["acceptance"])


def _short(target: str) -> str:
    return "1.5B" if "1.5b" in target else "0.5B" if "0.5b" in target else Path(target).name


def run_figures(a: dict, band: float) -> dict:
    """One run's curve as gains over the control on the target in use, and its recovery figures."""
    first, second = a["control"], a["drift"]["control"]
    at, new_target = a["drift"]["at"], a["drift"]["target"]
    curve = [{"prompts": p["prompts"], "target": _short(p["target"]), "acceptance": round(100 * p["acceptance"], 1),
              "tau": round(p["tau"], 3),
              "gain": round(_gain(p, second if p["target"] == new_target else first), 1),
              # from the stream's n-gram cache (--eval-with-cache): the same counts, or None where not measured
              "with_cache_same": (p["with_cache"]["accepted"], p["with_cache"]["proposed"])
              == (p["accepted"], p["proposed"]) if "with_cache" in p else None}
             for p in a["curve"]]
    before = [p for p in curve if p["target"] == _short(first["target"])]
    after = [p for p in curve if p["target"] == _short(new_target)]
    level = before[-1]["gain"]
    rec = drift_recovery(a["curve"], first, a["drift"], margin=band)  # goal 3 as `omnidraft adapt` prints it
    learned, back = rec["first_adaptation"], rec["recovered_after"]
    return {"switch": f"{_short(before[-1]['target'])} -> {_short(new_target)}", "at": at,
            "controls": {_short(first["target"]): round(100 * first["acceptance"], 1),
                         _short(second["target"]): round(100 * second["acceptance"], 1)},
            "curve": curve, "level_before_switch": level, "right_after_switch": after[0]["gain"],
            "first_adaptation_within_band_at": learned, "recovered_within_band_after": back,
            "end_gain": after[-1]["gain"], "seconds": a["seconds"],
            "update_s": a["summary"]["measured"]["update_s"], "publish_s": a["summary"]["measured"]["publish_s"]}


def old_domains(a: dict, b: dict) -> dict:
    """Each old domain's "after" in run ``a`` against the static drafter on a's last target (a's own "before" where
    the run measured it at the switch, else b's "before")."""
    out = {}
    for name, p in a["old"].items():
        static = p["before"] if "before_first_target" in p else b["old"][name]["before"]
        out[Path(name).stem] = {"after": round(100 * p["after"]["acceptance"], 1),
                                "static_same_target": round(100 * static["acceptance"], 1),
                                "points": round(100 * (p["after"]["acceptance"] - static["acceptance"]), 1),
                                "target": _short(p["after"]["target"])}
    return out


def plot(runs: list[dict], path: Path) -> Path | None:
    try:
        import matplotlib
        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        return None
    fig, ax = plt.subplots(figsize=(7.5, 4))
    for r, style in zip(runs, ("o-", "s-")):
        xs = [p["prompts"] for p in r["curve"]]
        ax.plot(xs, [p["gain"] for p in r["curve"]], style, label=f"{r['switch']} (switch at {r['at']})")
    ax.axhline(0, color="grey", ls="--", lw=1, label="static drafter on the target in use")
    ax.axvline(runs[0]["at"], color="k", lw=0.8)
    ax.set_xlabel("stream requests (JavaScript)")
    ax.set_ylabel("held-out acceptance over the control (points)")
    ax.set_title("The shipped drafter when the target switches half-way")
    ax.legend(fontsize=8)
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    return path


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("fwd", type=Path, help="adapt.json of the 0.5B -> 1.5B run")
    ap.add_argument("rev", type=Path, help="adapt.json of the 1.5B -> 0.5B run")
    ap.add_argument("out", type=Path, help="folder for drift-target-CARD.json and .png")
    ap.add_argument("--card", default="h100", help="the GPU the runs used, for the file names")
    ap.add_argument("--band", type=float, default=2.0, help="points within which a level counts as reached")
    args = ap.parse_args()
    a, b = (json.loads(p.read_text()) for p in (args.fwd, args.rev))
    runs = [run_figures(a, args.band), run_figures(b, args.band)]
    runs[0]["old"], runs[1]["old"] = old_domains(a, b), old_domains(b, a)
    args.out.mkdir(parents=True, exist_ok=True)
    (args.out / f"drift-target-{args.card}.json").write_text(json.dumps(runs, indent=1))
    for r in runs:
        print(f"{r['switch']}: gain {r['level_before_switch']:+.1f} at the switch, {r['right_after_switch']:+.1f} "
              f"right after, {r['end_gain']:+.1f} at the end; first adaptation within {args.band:g} points at "
              f"{r['first_adaptation_within_band_at']}, back within them {r['recovered_within_band_after']} "
              f"requests after the switch; old domains {r['old']}")
    print(plot(runs, args.out / f"drift-target-{args.card}.png"))


if __name__ == "__main__":
    main()
