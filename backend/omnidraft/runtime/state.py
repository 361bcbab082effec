"""Persistence: what a session learns online, kept in its state dir across processes.

The n-gram cache (per vocabulary pair), the acceptance predictors (per method, drafter version and pair) and
the rate guards' verdicts (``guard.json``, per machine, build, models, settings, drafter version and method).
The start-up measurements live beside them (``invariance.json``, ``costmodel.json``, ``threads.json``) and
the drafter copies served with a frequency-ranked head (``drafters/``), each written by its own module."""

from __future__ import annotations

from pathlib import Path
from typing import Iterable

from omnidraft import statefile
from omnidraft.assets import models
from omnidraft.speculative.methods import PairContext
from omnidraft.speculative.policy import DraftPolicy
from omnidraft.speculative.predictor import AcceptancePredictor
from omnidraft.vocab.bridge import VocabBridge
from omnidraft.vocab.ngram_cache import cache_filename

from .policies import method_of

GUARD_FILE = "guard.json"


def guard_key(cost_key: str, version: str, learner: str) -> str:
    """The rate guard's verdict holds for this machine, build, models, settings, drafter version and learner
    (a method under greedy or sampled requests, runtime.policies.learner)."""
    return f"{cost_key}|{version}|{learner}"


class StateDir:
    """One session's state dir: where each learned thing lives, read back, and written when it changed."""

    def __init__(self, setting: str):
        self.root = Path(setting) if setting else models.cache_dir() / "state"
        statefile.check_dir(self.root, "--state-dir")  # before loading and measuring, which write here
        self._saved_verdicts: dict[str, dict] = {}  # guard.json's entries as this process last wrote them

    def ngram_path(self, bridge: VocabBridge) -> Path:
        return self.root / cache_filename(bridge.draft_fp, bridge.target_fp)

    def predictor_path(self, learner: str, version: str, bridge: VocabBridge) -> Path:
        """The acceptance predictor lives with the drafter version it learned about."""
        return self.root / f"predictor-{learner}-{version}-{bridge.draft_fp}-{bridge.target_fp}.json"

    def predictor(self, learner: str, version: str, bridge: VocabBridge) -> AcceptancePredictor:
        return AcceptancePredictor.load(self.predictor_path(learner, version, bridge))

    def verdict(self, key: str) -> dict | None:
        """A rate guard's kept verdict (None: none kept, or a damaged file)."""
        return statefile.read(self.root / GUARD_FILE, key)

    def save(self, pair: PairContext, version: str, cost_key: str, predictors: dict[str, AcceptancePredictor],
             policies: Iterable[tuple[str, DraftPolicy]]) -> None:
        """The n-gram cache, the predictors that learned something, and each learner's guard verdict (a process
        that starts where drafting was measured losing does not pay to measure it again).  ``predictors`` and
        ``policies`` are keyed by learner (runtime.policies)."""
        pair.cache.save(self.ngram_path(pair.bridge))
        for who, predictor in predictors.items():
            if method_of(who) != "target" and predictor.updates:
                predictor.save(self.predictor_path(who, version, pair.bridge))
        for who, policy in policies:
            verdict, key = policy.guard.verdict(), guard_key(cost_key, version, who)
            if method_of(who) != "target" and verdict is not None and self._saved_verdicts.get(key) != verdict:
                statefile.write(self.root / GUARD_FILE, key, verdict)  # a server saves per request: the
                self._saved_verdicts[key] = verdict  # file is rewritten only when a verdict changed
