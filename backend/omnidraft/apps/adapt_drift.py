"""The target drift of ``omnidraft adapt --drift-target`` (issue 43 part 3): the stream goes on against another
target of the same vocabulary, with the drafter as adapted so far and the trainer still learning.

A target changes every acceptance, the old domains' too: on the same JavaScript prompts the static drafter keeps
39 % of its drafts for the 0.5B and 31 % for the 1.5B, and the old domains move 4-7 points either way (BENCHMARKS.md,
Adaptation, "A stream that switches target").  So at the switch the control (the static drafter, exported the
trainer's way) is measured on the new target, on the held-out prompts and on each old domain, and what the run
measures after the switch is read against those: the old domains' ``before`` becomes the control's on the new target
(the first target's stays as ``before_first_target``).
"""

from __future__ import annotations

from dataclasses import replace

from omnidraft.assets import models
from omnidraft.errors import BadRequest
from omnidraft.llama.engine import Engine, EngineConfig
from omnidraft.runtime.session import Session
from omnidraft.vocab.bridge import vocab_fingerprint


def check_drift_target(target: str, target_fp: str) -> None:
    """Refuse, before anything streams, a drift target whose vocabulary is not the first target's: the records,
    the n-gram cache and the drafter's mapping all speak that one (qwen2.5-coder-0.5b <-> 1.5b share it)."""
    with Engine(models.resolve(target), EngineConfig(vocab_only=True)) as e:
        if vocab_fingerprint(e.token_bytes) != target_fp:
            raise BadRequest(f"--drift-target {target}: its vocabulary is not the first target's; a target drift "
                             "keeps the vocabulary (qwen2.5-coder-0.5b <-> 1.5b)")


def control_point(r, prompts: list, set_name: str, prompts_seen: int, label: str, meta: dict) -> dict:
    """The control (loaded in the run's session now) measured on ``prompts``, with its export's meta."""
    return {**r.measure(prompts, "control", set_name, prompts_seen, label), **meta,
            "version": f"control ({meta['qtype']}, untrained)"}


def switch_target(r, target: str) -> Session:
    """Replace the run's session ``r.session`` by one on ``target`` with the drafter as adapted so far (the
    registry's current version); the trainer and the stream go on (``check_drift_target`` made sure that it speaks
    the first target's vocabulary).  The controls are measured on the new target first."""
    old = r.session
    settings = replace(r.settings, target=target)
    new = Session(settings, registry=old.registry).warm_up()
    if r.cfg.verify_batch:
        new.max_verify_batch = r.cfg.verify_batch
    old.save_state()
    old.close()
    r.session, r.settings = new, settings
    if r.control_file is not None:  # the static drafter on the new target: the line the rest is read by
        path, meta = r.control_file
        new.load_drafter(str(path))
        at = r.cfg.drift_point()
        r.drift_control = control_point(r, r.items.heldout, r.cfg.new_domain(), at, f"control on {target}", meta)
        for name, prompts in r.items.old.items():  # "after" will be measured on this target: so is "before" now
            point = r.old.setdefault(name, {})
            if "before" in point:
                point["before_first_target"] = point["before"]
            point["before"] = control_point(r, prompts, name, at, f"{name} control on {target}", meta)
    new.maybe_swap()  # the version the first target's records trained
    print(f"target switched: {old.settings.target} -> {target} (drafter {new.drafter_version})", flush=True)
    return new
