"""What ``omnidraft adapt`` reports: the issue's figures from a run (``summary``) and its plot (``plot``):
held-out acceptance and tau over the stream beside the control, and the old domains before and after."""

from __future__ import annotations

from pathlib import Path

from omnidraft.online.rates import acceptance_text

# issue 26's goals: held-out acceptance and tau above the control by the end of the stream (its 64 prompts; issue
# 43's scenarios: 512), the old domains within 2 points of before (forgetting is what it guards against: a gain
# there is no miss), one update <= 20 s, export + check + swap <= 10 s, the run <= 10 minutes (the 64-prompt run's)
GOALS = {"acceptance_points": 10.0, "tau": 0.3, "prompts": 64, "old_points": 2.0, "update_s": 20.0,
         "publish_s": 10.0, "run_s": 600.0}
CROSSINGS = (5.0, 10.0)  # points over the control: issue 43 asks where a curve first reaches each


def _gain(p: dict, control: dict) -> float:
    return 100 * (p["acceptance"] - control["acceptance"])


def summary(curve: list[dict], control: dict | None, old: dict, updates: list[dict], run_s: float,
            within: int = GOALS["prompts"]) -> dict:
    """The run's figures against GOALS after its last point within ``within`` stream prompts (the stream's
    length), its best point and where it first reached each of CROSSINGS (None where not measured)."""
    points = [p for p in curve if p["measured"] and p["prompts"] <= within]
    last = points[-1] if points else None
    ok_control = control is not None and control["measured"] and last is not None
    gain = _gain(last, control) if ok_control else None
    tau = last["tau"] - control["tau"] if ok_control else None
    best = max(points, key=lambda p: p["acceptance"]) if ok_control else None
    crossed = {f"{c:+.0f}": next((p["prompts"] for p in points if _gain(p, control) >= c), None) if ok_control
               else None for c in CROSSINGS}
    drift = {s: 100 * (p["after"]["acceptance"] - p["before"]["acceptance"]) for s, p in old.items()
             if p.get("after") and p["before"]["measured"] and p["after"]["measured"]}
    train = [u["train_s"] for u in updates]
    publish = [u.get("publish_s", u["export_s"]) + u.get("swap_s", 0.0) for u in updates]
    got = {"prompts": last["prompts"] if last else None, "acceptance_points": gain, "tau": tau, "old_points": drift,
           "best": {"prompts": best["prompts"], "acceptance_points": _gain(best, control)} if best else None,
           "crossed": crossed,
           "update_s": max(train, default=None), "publish_s": max(publish, default=None), "run_s": run_s}
    # None: nothing to judge (no old domains streamed beside it; the 10-minute goal is the 64-prompt run's, not a
    # long stream's), which the report prints as such rather than as a miss
    met = {"acceptance_points": gain is not None and gain >= GOALS["acceptance_points"],
           "tau": tau is not None and tau >= GOALS["tau"],
           "old_points": all(d >= -GOALS["old_points"] for d in drift.values()) if drift else None,
           "update_s": bool(train) and max(train) <= GOALS["update_s"],
           "publish_s": bool(publish) and max(publish) <= GOALS["publish_s"],
           "run_s": run_s <= GOALS["run_s"] if within <= GOALS["prompts"] else None}
    return {"goals": GOALS, "measured": got, "met": met}


def drift_recovery(curve: list[dict], control: dict | None, drift: dict | None, which: str = "plain",
                   margin: float = GOALS["old_points"]) -> dict | None:
    """Goal 3 of issue 43 for a drift run: how many requests after the drift ``at`` acceptance took to come back
    within ``margin`` points of its level before the drift, against how many the first adaptation took to come
    within ``margin`` of the level it had reached at the drift; met where the recovery was the shorter.

    * a target drift: gains over the control on the target in use (the target alone moves acceptance by 4-8
      points); the level is the gain at the switch on the first target, the first adaptation the first point after
      0 on it within the margin of that level;
    * a set drift: the drift set's acceptance before any stream is its level, the recovery its first point after
      the drift within the margin; the first adaptation is the streamed set's first point within the margin of its
      value at the drift.

    ``which``: "plain" (each point from an empty n-gram cache) or "with_cache" (from the stream's). None where the
    run had no drift; ``read`` False where the points to read it are missing (too few drafted tokens for a rate)."""
    if not drift:
        return None
    at, kind = drift["at"], "target" if drift.get("target") else "set"
    head = {"kind": kind, "at": at, "which": which, "margin": margin}

    def acc(p: dict) -> float | None:
        q = p if which == "plain" else p.get("with_cache")
        return 100 * q["acceptance"] if q and q.get("measured", True) else None

    if kind == "target":  # gains over the control on the target in use
        new_target, new_control = drift["target"], drift.get("control")
        if control is None or new_control is None:
            return {**head, "read": False}
        gains = [(p["prompts"], p["target"] == new_target,
                  acc(p) - 100 * (new_control if p["target"] == new_target else control)["acceptance"])
                 for p in curve if acc(p) is not None]
        first = [(n, g) for n, new, g in gains if not new]
        after = [(n, g) for n, new, g in gains if new]
        level = reached = first[-1][1] if first else None
    else:  # the drift set's own level before any stream; the streamed set's at the drift
        series = [(p["prompts"], acc(p)) for p in drift.get("curve", []) if acc(p) is not None]
        first = [(p["prompts"], acc(p)) for p in curve if acc(p) is not None and p["prompts"] <= at]
        after = [(n, a) for n, a in series if n > at]
        level = series[0][1] if series and series[0][0] == 0 else None
        reached = first[-1][1] if first else None
    if level is None or reached is None or not after:  # e.g. points with too few drafted tokens for a rate
        return {**head, "read": False}
    took = next((n for n, v in first if n > 0 and v >= reached - margin), None)
    back = next((n - at for n, v in after if v >= level - margin), None)
    return {**head, "read": True, "level": round(level, 1), "first_adaptation": took, "recovered_after": back,
            "met": back is not None and took is not None and back < took}


def recovery_lines(rec: dict | None) -> list[str]:
    if not rec:
        return []
    cache = "an empty n-gram cache" if rec["which"] == "plain" else "the stream's n-gram cache"
    if not rec["read"]:
        return [f"drift at {rec['at']} ({rec['kind']}, {cache}): recovery not read (a point before or after it has "
                "too few drafted tokens for a rate)"]
    what = (f"{rec['level']:+.1f} points over the control at the switch" if rec["kind"] == "target"
            else f"{rec['level']:.1f} % on the drift set before the stream")
    back = "not within the run" if rec["recovered_after"] is None else f"after {rec['recovered_after']} requests"
    took = "never within the run" if rec["first_adaptation"] is None else f"{rec['first_adaptation']} requests"
    return [f"drift at {rec['at']} ({rec['kind']}, {cache}): back within {rec['margin']:.0f} points of its level "
            f"({what}) {back}; the first adaptation took {took} (goal: fewer: "
            f"{'met' if rec['met'] else 'NOT met'})"]


def summary_lines(s: dict) -> list[str]:
    g, m, ok = s["goals"], s["measured"], s["met"]
    yes = {True: "met", False: "NOT met", None: "nothing to judge"}

    def num(v, fmt):
        return "not measured" if v is None else format(v, fmt)

    old = ", ".join(f"{k} {v:+.1f}" for k, v in m["old_points"].items()) or "not measured"
    best, crossed = m.get("best"), m.get("crossed") or {}
    first = ", ".join(f"{c} after {'no point' if n is None else n}" for c, n in crossed.items())
    return [f"after {m['prompts']} prompts: held-out acceptance {num(m['acceptance_points'], '+.1f')} points vs the "
            f"control (goal >= +{g['acceptance_points']:.0f}: {yes[ok['acceptance_points']]}), tau "
            f"{num(m['tau'], '+.3f')} (goal >= +{g['tau']}: {yes[ok['tau']]})",
            *([f"best point: {best['acceptance_points']:+.1f} points after {best['prompts']} prompts; first reached "
               f"{first}"] if best else []),
            f"old domains, acceptance after - before: {old} points (goal: no more than {g['old_points']:.0f} lost: "
            f"{yes[ok['old_points']]})",
            f"slowest update {num(m['update_s'], '.1f')} s (goal <= {g['update_s']:.0f}: {yes[ok['update_s']]}), "
            f"slowest export + check + swap {num(m['publish_s'], '.1f')} s (goal <= {g['publish_s']:.0f}: "
            f"{yes[ok['publish_s']]}), run {m['run_s']:.0f} s" + (
                "" if ok["run_s"] is None else f" (goal <= {g['run_s']:.0f}: {yes[ok['run_s']]})"),
            *(line for rec in (s.get("drift_recovery") or {}).values() for line in recovery_lines(rec))]


def plot(curve: list[dict], control: dict | None, path: Path, settings=None, old: dict | None = None,
         title: str = "") -> Path | None:
    """Acceptance and tau over the prompts streamed (control dashed), and the old domains before/after."""
    try:  # lazy: matplotlib costs ~0.7 s at start-up and is the optional 'plots' extra (no plot without it)
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt  # lazy: as above
    except ImportError:
        return None
    panels = 3 if old else 2
    fig, axes = plt.subplots(1, panels, figsize=(4.5 * panels, 3.8))
    _curve_panels(axes[0], axes[1], curve, control)
    if old:
        _old_panel(axes[2], old)
    k = curve[0]["k"] if curve else "?"
    pair = f"{settings.draft} -> {settings.target}, " if settings is not None else ""
    fig.suptitle(f"omnidraft adapt: {title or 'held-out'} ({pair}greedy, k = {k})", fontsize=10)
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)
    return path


def _curve_panels(ax1, ax2, curve: list[dict], control: dict | None) -> None:
    ok = [p for p in curve if p["measured"]]
    low = [p for p in curve if not p["measured"]]
    x = [p["prompts"] for p in ok]
    ax1.plot(x, [100 * p["acceptance"] for p in ok], "o-", color="tab:blue", label="trained drafter")
    for p in ok:
        ax1.annotate(f"{p['accepted']}/{p['proposed']}", (p["prompts"], 100 * p["acceptance"]), fontsize=7,
                     textcoords="offset points", xytext=(0, 6), ha="center")
    ax2.plot(x, [p["tau"] for p in ok], "s-", color="tab:orange", label="trained drafter")
    cached = [p for p in ok if p.get("with_cache", {}).get("measured")]
    if cached:  # --eval-with-cache: the same drafter from the stream's n-gram cache
        xc = [p["prompts"] for p in cached]
        label = "trained, with the stream's n-gram cache"
        ax1.plot(xc, [100 * p["with_cache"]["acceptance"] for p in cached], "o:", color="tab:purple", label=label)
        ax2.plot(xc, [p["with_cache"]["tau"] for p in cached], "s:", color="tab:purple", label=label)
    if control is not None and control["measured"]:
        ax1.axhline(100 * control["acceptance"], ls="--", color="grey",
                    label=f"control: untrained, {control['qtype']} ({control['accepted']}/{control['proposed']})")
        ax2.axhline(control["tau"], ls="--", color="grey", label=f"control: untrained, {control['qtype']}")
    if low:
        ax1.plot([p["prompts"] for p in low], [0] * len(low), "x", color="red", clip_on=False,
                 label="too few drafted tokens (not a rate)")
    ax1.set_ylabel("held-out acceptance (%)")
    ax2.set_ylabel("tokens per target pass (tau)")
    # a curve within noise must look flat: never zoom in past 10 acceptance points / 0.25 tokens per pass
    for ax, span in ((ax1, 10.0), (ax2, 0.25)):
        ax.set_xlabel("stream prompts seen")
        lo, hi = ax.get_ylim()
        if hi - lo < span:
            mid = (lo + hi) / 2
            ax.set_ylim(mid - span / 2, mid + span / 2)
        ax.legend(fontsize=7, loc="lower right")
        ax.grid(alpha=0.3)


def _old_panel(ax, old: dict) -> None:
    names = list(old)
    for j, (when, color) in enumerate((("before", "tab:grey"), ("after", "tab:green"))):
        pts = [old[n].get(when) for n in names]
        xs = [i + (j - 0.5) * 0.38 for i in range(len(names))]
        ax.bar(xs, [100 * p["acceptance"] if p else 0 for p in pts], width=0.36, color=color,
               label="base drafter" if when == "before" else "after the stream")
        for x, p in zip(xs, pts):
            if p:
                ax.annotate(acceptance_text(p["accepted"], p["proposed"]).split(" (")[0], (x, 100 * p["acceptance"]),
                            fontsize=7, textcoords="offset points", xytext=(0, 3), ha="center")
    ax.set_xticks(range(len(names)), names)
    ax.set_ylabel("held-out acceptance (%)")
    ax.set_title("old domains", fontsize=9)
    ax.legend(fontsize=7, loc="lower right")
    ax.grid(alpha=0.3, axis="y")
