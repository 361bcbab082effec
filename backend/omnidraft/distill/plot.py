"""The distillation plot: training loss and held-out agreement per layer choice."""

from __future__ import annotations

from pathlib import Path

import numpy as np


def plot(histories: dict[str, dict], out: Path) -> Path:
    """Training loss and held-out top-1 agreement per layer choice."""
    # lazy: matplotlib costs ~0.7 s at start-up and is the optional 'plots' extra
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt  # lazy: as above

    fig, (a, b) = plt.subplots(1, 2, figsize=(11, 4))
    for name, h in histories.items():
        tr = h["train"]
        w = min(9, len(tr))
        ys = np.convolve([r["loss"] for r in tr], np.ones(w) / w, mode="valid")
        xs = [r["step"] for r in tr][w // 2: w // 2 + len(ys)]
        a.plot(xs, ys, label=name)
        b.plot([r["step"] for r in h["val"]], [r["val_top1_dm"] for r in h["val"]], marker="o", label=name)
    a.set(xlabel="step", ylabel="hybrid loss (train, smoothed)", yscale="log")
    b.set(xlabel="step", ylabel="held-out top-1 agreement with the target\n(directly mapped positions)")
    for ax in (a, b):
        ax.grid(alpha=0.3)
        ax.legend(fontsize=8)
    fig.tight_layout()
    out.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(out, dpi=110)
    plt.close(fig)
    return out
