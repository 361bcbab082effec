"""Online acceptance predictor: P(the target accepts this drafted token | all before it were accepted).

Learned from verification outcomes alone (no extra data): after each step, every
drafted token up to and including the first rejected one is a labelled example;
tokens after it were never judged and are not used (censored).  Logistic regression
by SGD over cheap features, plus a running acceptance rate per drafter token id.
Small (a few hundred bytes + the token table), persisted as JSON with the drafter
version, updated continuously.  Calibration (predicted vs observed, binned) is kept.
"""

from __future__ import annotations

import json
import math
import os
from dataclasses import dataclass
from pathlib import Path

import numpy as np

FEATURES = ("bias", "p_top1", "entropy", "margin", "depth", "ngram", "direct", "token_rate", "logit_p")


@dataclass
class DraftFeatures:
    """What the drafter knows about one token it just drafted (computed from its logits row)."""

    token: int
    depth: int
    p_top1: float
    entropy: float  # nats, of the drafter's distribution
    margin: float  # p_top1 - p_top2
    ngram: bool = False  # completes a cached n-gram merge
    direct: bool = True  # maps directly to one target token

    @staticmethod
    def from_row(row: np.ndarray, token: int, depth: int) -> "DraftFeatures":
        """Two passes over the row (exp, then a dot product) instead of normalising it, taking its log and
        partitioning it: this runs for every drafted token.  On SmolLM2's 49k vocabulary, in a real generation
        on the 2-core EPYC, 0.08-0.09 ms a token instead of 0.14-0.18 (0.3 ms of a 4-token step: little beside
        a CPU target pass, more beside a 3-4 ms GPU step).  With z = row - max, e = exp(z), s = sum(e):
        p = e / s, entropy = log s - (e . z) / s, and the top token's e is 1."""
        top = int(np.argmax(row))
        m = row[top]
        z = row - m
        np.maximum(z, -1e4, out=z)  # banned tokens are -inf (the drafter's bias): 0 * -inf would be NaN below
        e = np.exp(z)
        s = float(e.sum())
        ent = math.log(s) - float(np.dot(e, z)) / s
        second = max(row[:top].max(initial=-np.inf), row[top + 1:].max(initial=-np.inf))
        margin = (1.0 - math.exp(float(second - m))) / s
        return DraftFeatures(int(token), depth, float(e[token]) / s, ent, margin)


class AcceptancePredictor:
    def __init__(self, lr: float = 0.05, token_prior: float = 0.5, prior_weight: float = 2.0):
        self.w = np.zeros(len(FEATURES))
        self.w[FEATURES.index("logit_p")] = 1.0  # start as "acceptance ~ drafter confidence"
        self.lr = lr
        self.token_prior, self.prior_weight = token_prior, prior_weight
        self.token_hits: dict[int, list[float]] = {}  # token -> [accepted, seen]
        self.bins = np.zeros((10, 2))  # calibration: per predicted-probability decile [sum outcome, count]
        self.updates = 0

    # -------------------------------------------------------------- model
    def _x(self, f: DraftFeatures) -> np.ndarray:
        hits, seen = self.token_hits.get(f.token, (0.0, 0.0))
        rate = (hits + self.token_prior * self.prior_weight) / (seen + self.prior_weight)
        p = min(max(f.p_top1, 1e-4), 1 - 1e-4)
        return np.array([1.0, f.p_top1, f.entropy / 5.0, f.margin, min(f.depth, 8) / 8.0, float(f.ngram),
                         float(f.direct), rate, math.log(p / (1 - p)) / 4.0])

    def predict(self, f: DraftFeatures) -> float:
        z = float(self.w @ self._x(f))
        return 1.0 / (1.0 + math.exp(-max(min(z, 30.0), -30.0)))

    def update(self, feats: list[DraftFeatures], n_accepted: int) -> None:
        """``n_accepted`` of the drafted tokens were accepted; the next one (if any) was rejected."""
        for i, f in enumerate(feats[: n_accepted + 1]):
            y = 1.0 if i < n_accepted else 0.0
            x = self._x(f)
            p = 1.0 / (1.0 + math.exp(-max(min(float(self.w @ x), 30.0), -30.0)))
            self.bins[min(int(p * 10), 9)] += (y, 1.0)
            self.w += self.lr * (y - p) * x  # log-loss gradient step
            h = self.token_hits.setdefault(f.token, [0.0, 0.0])
            h[0] += y
            h[1] += 1.0
            self.updates += 1

    # ---------------------------------------------------------- reporting
    def calibration(self) -> dict:
        """Expected calibration error and the per-decile table (predicted mid-point, observed, count)."""
        total = self.bins[:, 1].sum()
        rows, ece = [], 0.0
        for b in range(10):
            s, n = self.bins[b]
            if n:
                obs = s / n
                rows.append({"bin": f"{b / 10:.1f}-{(b + 1) / 10:.1f}", "observed": obs, "count": int(n)})
                ece += (n / total) * abs(obs - (b + 0.5) / 10)
        return {"ece": ece if total else None, "bins": rows, "examples": int(total)}

    # -------------------------------------------------------- persistence
    def save(self, path: str | os.PathLike) -> None:
        path = Path(path)
        path.parent.mkdir(parents=True, exist_ok=True)
        data = {"version": 1, "features": FEATURES, "w": self.w.tolist(), "updates": self.updates,
                "bins": self.bins.tolist(), "token_hits": {str(k): v for k, v in self.token_hits.items()}}
        tmp = path.with_name(path.name + ".tmp")
        tmp.write_text(json.dumps(data))
        os.replace(tmp, path)

    @classmethod
    def load(cls, path: str | os.PathLike) -> "AcceptancePredictor":
        """A missing or unreadable file gives a fresh predictor (it learns again in a few steps)."""
        p = cls()
        try:
            data = json.loads(Path(path).read_text())
            if tuple(data["features"]) == FEATURES:
                p.w = np.array(data["w"], dtype=float)
                p.updates = int(data["updates"])
                p.bins = np.array(data["bins"], dtype=float)
                p.token_hits = {int(k): list(v) for k, v in data["token_hits"].items()}
        except (OSError, ValueError, KeyError, TypeError):
            pass
        return p
