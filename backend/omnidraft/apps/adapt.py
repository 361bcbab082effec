"""``omnidraft adapt``: the whole online loop in one process, on a domain the drafter never saw, beside a control.

    prompt stream -> speculative generation (record_topk) -> record -> outbox -> HTTP upload
    -> trainer (every I prompts: train, export, check, publish) -> Session.maybe_swap() -> held-out eval

The default scenario (issue 26) is a user who starts writing JavaScript: distillation never read a JavaScript
file (``distill.sources.ADAPTATION_DOMAIN``), the stream is 64 completion requests on npm's modules
(``assets.prompts`` set ``javascript``, its ``train`` files), the held-out prompts come from its held-out files,
never streamed, and the old domains (Python code, chat) are measured before and after.  Each request goes the
way a server's request goes: the session's generator, its training record, the outbox, the uploader.
``--stream-set npm-cli`` (or ``undici``) is one user's own repository instead (``assets.repo_sets``: stream and
held-out prompts from different files of one JavaScript codebase); measured, it gains no more than the language
at large (BENCHMARKS.md, Adaptation), so the language stays the default.  ``--stream-set nl-fr`` (``nl-de``,
``nl-nl``: ``assets.lang_sets``) is a natural language instead, translated man pages split by page; measured, it
gains no more than JavaScript (+0.9 to +1.6 points against +1.9).

The trainer is its own process (``omnidraft trainer serve`` on a free loopback port), met the way a
server deployment meets it: records posted over HTTP, drafter versions read from its registry on disk.
It replays records of the old domains (``--replay``: the target's own continuations of Python code and chat
prompts from those sets' stream splits, generated here once and cached) in every update.  The loop waits for
each update (the trainer's ``/v1/status``) before evaluating, which keeps the measurements free of training
load.  The control is exported by ``omnidraft trainer export``.

The held-out evaluation measures the drafter, nothing else:
* it drafts ``eval_k`` tokens every step (the ``fixed`` policy), whatever policy the stream uses: the
  default ``cost`` policy rightly hardly drafts on a 2-core CPU, which would leave nothing to measure;
* it is greedy, so the text is the target's every time and only the drafting changes;
* every evaluation starts from the same empty n-gram cache and throws its additions away, so neither the
  stream's nor the held-out text's n-grams move the curve (``--eval-with-cache`` measures each point once more
  from a copy of the stream's cache: what the cache adds);
* a control, the untrained drafter re-exported the way the trainer exports (torch -> GGUF -> the same
  quantization -> the same check), separates the training's gain from the re-quantization's;
* a point with fewer than ``rates.MIN_DRAFTED`` drafted tokens is flagged and not plotted as a rate.

Every measurement also goes into the registry's ``heldout.json``: a server swapping from that registry
(``omnidraft serve --registry <out>/trainer/registry``) shows the held-out curve in the app's Learning tab as
it grows.  Defaults are the settings measured best on a 2-core machine (BENCHMARKS.md, Adaptation).  The settings
are ``adapt_config.AdaptConfig``; ``--scenario NAME`` (issue 43: a drafter that never saw the target, long streams,
a drift) names sets of them (``adapt_scenarios``); ``--checkpoints`` says after which stream prompts to measure.
"""

from __future__ import annotations

import copy
import hashlib
import json
import logging
import os
import shutil
import time
from dataclasses import dataclass, field
from pathlib import Path

from omnidraft.assets import models
from omnidraft.errors import BadRequest
from omnidraft.online.outbox import Outbox, Uploader
from omnidraft.online.rates import acceptance_text, measured
from omnidraft.online.records import build_record
from omnidraft.online.registry import DrafterRegistry
from omnidraft.runtime.session import Session
from omnidraft.speculative.generator import GenerationParams
from omnidraft.speculative.policy import DraftPolicy, PolicyConfig
from omnidraft.speculative.stats import GenerationStats
from omnidraft.vocab.ngram_cache import NGramCache

from .adapt_config import AdaptConfig
from .adapt_drift import check_drift_target, control_point, switch_target
from .adapt_items import Items, Prompt, load_drift, load_items, load_old
from .adapt_procs import TrainerProcess, export_control
from .adapt_report import plot as _report_plot
from .adapt_report import drift_recovery, summary, summary_lines

log = logging.getLogger(__name__)

# the target `omnidraft adapt` defaults to: the 0.5B in the speed format, whose verification batches are
# bit-identical up to 8 rows here (the Q4_K_M file allows 3, which would cap the held-out draft length at 2)
DEFAULT_TARGET = "qwen2.5-coder-0.5b:q4_0_pure"


def evaluate(session, prompts: list[Prompt], max_tokens: int, k: int, ngram=None, records: list | None = None) -> dict:
    """Acceptance and tokens per target pass over the held-out prompts (pooled), greedy, drafting k per step.

    The draft length is fixed here, not the session's policy: an evaluation that drafts nothing
    measures nothing.  ``ngram``: the n-gram cache to start from (copied; default: the session's).
    ``records``: if a list, each generation's training record is appended to it (a held-out loss)."""
    pair = copy.copy(session.pair)  # the session's engines and codecs, with a private n-gram cache
    pair.cache = copy.deepcopy(ngram if ngram is not None else session.pair.cache)
    # the session's target, verification limits and method, drafting k a step: not the session's policy
    gen = session.compose(session.settings.method, pair, DraftPolicy(PolicyConfig(name="fixed", k=k)))
    k_run = min(k, gen.max_draft)
    total = GenerationStats(gen.method)  # pooled: acceptance and tau as each answer defines them
    drafted = 0
    lengths: dict[int, int] = {}  # drafter tokens per step -> steps
    t0 = time.perf_counter()
    for p in prompts:
        pin = gen.prompt_for(*p)
        f = gen.generate(pin, GenerationParams(max_tokens=max_tokens, record_topk=8 if records is not None else 0))
        if records is not None:
            records.append(build_record(f, pin, pair, gen.method, session.drafter_version))
        total.add(f.stats)
        for s in f.steps:
            drafted += s.drafted
            lengths[s.drafted] = lengths.get(s.drafted, 0) + 1
    return {"acceptance": total.acceptance_rate, "measured": measured(total.proposed), "tau": total.tau,
            "accepted": total.accepted, "proposed": total.proposed, "drafted": drafted,
            "draft_lengths": dict(sorted(lengths.items())), "k": k_run, "k_asked": k,
            "tokens": total.completion_tokens, "target_passes": total.target_passes,
            "seconds": round(time.perf_counter() - t0, 2)}


def answer_record(session, item: Prompt, max_tokens: int, record_topk: int, version: str | None = None):
    """The session's answer to ``item`` and its training record (as the server uploads it), tagged with
    ``version`` (default: the drafter version now in use)."""
    gen = session.generator()
    pin = gen.prompt_for(*item)
    final = gen.generate(pin, GenerationParams(max_tokens=max_tokens, record_topk=record_topk))
    return final, build_record(final, pin, session.pair, gen.method, version or session.drafter_version)


def replay_records(session, prompts: list[Prompt], cfg: AdaptConfig) -> list[dict]:
    """The target's records of the old domains' stream prompts (what the trainer replays), cached by everything
    they depend on: greedy, so the same target, vocabularies and prompts give the same records."""
    bridge = session.pair.bridge
    key = hashlib.sha256(json.dumps([Path(session.target.path).name, bridge.draft_fp, bridge.target_fp, prompts,
                                     cfg.max_tokens, cfg.record_topk]).encode()).hexdigest()[:24]
    path = models.cache_dir() / "replay" / f"{key}.jsonl"
    if path.is_file():
        return [json.loads(x) for x in path.read_text().splitlines() if x.strip()]
    recs = [answer_record(session, item, cfg.max_tokens, cfg.record_topk, "base")[1] for item in prompts]
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_suffix(".tmp")
    tmp.write_text("".join(json.dumps(r) + "\n" for r in recs))
    tmp.replace(path)
    return recs


def _fresh(out: Path) -> None:
    """A run starts from the base drafter: a previous run's trainer state and results in ``out`` go."""
    for name in ("trainer", "trainer.log", "outbox.sqlite", "adapt.json", "adapt.png", "replay.jsonl", "drafters"):
        p = out / name
        if p.is_dir():
            shutil.rmtree(p)
        elif p.exists():
            p.unlink()
    for p in out.glob("control-*.gguf"):
        p.unlink()


@dataclass
class Run:
    """One run's state, shared by its phases."""

    cfg: AdaptConfig
    settings: object
    session: object
    items: Items
    registry: DrafterRegistry  # the trainer's, opened here first: measurements go into its heldout.json
    empty: NGramCache  # every evaluation starts from (a copy of) this
    threads: int = 0
    curve: list[dict] = field(default_factory=list)
    control: dict | None = None
    drift_curve: list[dict] = field(default_factory=list)  # the drift set's held-out, at the same points
    drift_control: dict | None = None  # a set drift: the control on that set; a target drift: on the new target
    control_file: tuple[Path, dict] | None = None  # the control's GGUF and its export's meta, for a target drift
    old: dict[str, dict] = field(default_factory=dict)  # old domain -> {"before": point, "after": point} (after a
    # target switch "before" is the control's on the new target; adapt_drift keeps the first's as before_first_target)
    swaps: dict[str, float] = field(default_factory=dict)  # version -> seconds its swap took

    def measure(self, prompts: list[Prompt], kind: str, set_name: str, prompts_seen: int, label: str = "") -> dict:
        """Evaluate the drafter in use; print it; keep it in the registry's heldout.json."""
        cfg = self.cfg
        ev = evaluate(self.session, prompts, cfg.eval_max_tokens, cfg.eval_k, self.empty)
        pt = {"kind": kind, "set": set_name, "prompts": prompts_seen, "version": self.session.drafter_version,
              "target": self.session.settings.target, **ev}
        _show(pt, label)
        if cfg.eval_with_cache and kind in ("curve", "drift"):
            pt["with_cache"] = self._with_cache(prompts)
        self.registry.add_evaluation({k: v for k, v in pt.items() if k != "draft_lengths"})
        return pt

    def _with_cache(self, prompts: list[Prompt]) -> dict:
        """The same drafter on the same prompts from (a copy of) the stream's n-gram cache: the server's as it
        stands, its additions thrown away again, so the stream's own cache alone differs from the plain point."""
        live = self.session.pair.cache
        ev = evaluate(self.session, prompts, self.cfg.eval_max_tokens, self.cfg.eval_k, live)
        keep = ("acceptance", "measured", "tau", "accepted", "proposed", "tokens", "target_passes", "seconds")
        out = {k: ev[k] for k in keep} | {"cache_entries": len(live)}
        tau = f"tau {out['tau']:.3f}" if out["measured"] else "tau (not measured)"
        print(f"  with the stream's n-gram cache ({len(live)} entries): acceptance "
              f"{acceptance_text(out['accepted'], out['proposed'])}, {tau}", flush=True)
        return out


def run(cfg: AdaptConfig, settings, threads: int = 0) -> dict:
    out = Path(cfg.out)
    out.mkdir(parents=True, exist_ok=True)
    _fresh(out)
    stream, heldout = load_items(cfg)
    old, replay = load_old(cfg)
    t_start = time.perf_counter()
    session = Session(settings).warm_up()
    if cfg.verify_batch:
        session.max_verify_batch = cfg.verify_batch
    if session.pair is None:
        session.close()
        raise BadRequest(f"adapt trains a drafter model; method {settings.method!r} has none")
    bridge = session.pair.bridge
    if cfg.drift_target:
        try:
            check_drift_target(cfg.drift_target, bridge.target_fp)
        except BadRequest:
            session.close()
            raise
    r = Run(cfg, settings, session, Items(stream, heldout, old, replay, load_drift(cfg)),
            DrafterRegistry(out / "trainer" / "registry"), NGramCache(bridge.draft_fp, bridge.target_fp), threads)
    trainer = None
    try:
        replay_path = _replay_file(r, out)
        _baseline(r)
        # the trainer starts (its imports, the drafter's vocabulary, the replay records) while the control is
        # exported in a process of its own, and is ready before anything more is measured
        trainer = TrainerProcess(out / "trainer", cfg.trainer_options(_trainer_base(settings), threads, replay_path),
                                 out / "trainer.log", wait=False)
        control = export_control(_trainer_base(settings), cfg.qtype, out, r.threads) if cfg.control else None
        trainer.wait_ready()
        if control is not None:
            _control(r, *control)
        _stream(r, trainer, out)
        for name, prompts in old.items():
            r.old.setdefault(name, {})["after"] = r.measure(prompts, "old", name, len(stream), f"{name} after")
    finally:
        if trainer is not None:
            trainer.stop()
        r.session.save_state()  # a target drift replaced the session it started with
        r.session.close()
    return _report(r, trainer.history() if trainer else [], out, time.perf_counter() - t_start)


def _replay_file(r: Run, out: Path) -> Path | None:
    if not r.items.replay or r.cfg.replay_ratio <= 0:
        return None
    t0 = time.perf_counter()
    recs = replay_records(r.session, r.items.replay, r.cfg)
    path = out / "replay.jsonl"
    path.write_text("".join(json.dumps(x) + "\n" for x in recs))
    print(f"replay: {len(recs)} records of {', '.join(r.items.old)} ({time.perf_counter() - t0:.0f} s)", flush=True)
    return path


def _trainer_base(settings) -> str:
    """What the trainer adapts: the pinned drafter a served ``NAME:FORMAT`` is made from, never its cut head."""
    return models.named_format(settings.draft)[0] or settings.draft


def _baseline(r: Run) -> None:
    """The base drafter on the new domain's held-out prompts (the curve's first point) and the old domains'."""
    cfg = r.cfg
    new = cfg.new_domain()
    if cfg.baseline:
        r.curve.append(r.measure(r.items.heldout, "curve", new, 0))
        if r.items.drift:
            r.drift_curve.append(r.measure(r.items.drift, "drift", cfg.drift_set, 0, f"{cfg.drift_set} (drift)"))
        for name, prompts in r.items.old.items():
            r.old[name] = {"before": r.measure(prompts, "old", name, 0, f"{name} before")}


def _control(r: Run, path: Path, meta: dict) -> None:
    """The control (``export_control``'s file) on the new domain's held-out prompts (and the drift set's)."""
    cfg, s, settings = r.cfg, r.session, r.settings
    new = cfg.new_domain()
    s.load_drafter(str(path))
    r.control_file = (path, meta)
    r.control = control_point(r, r.items.heldout, new, 0, "control", meta)
    if r.items.drift:
        r.drift_control = control_point(r, r.items.drift, cfg.drift_set, 0, f"{cfg.drift_set} control", meta)
    s.load_drafter(settings.draft)


def _stream(r: Run, trainer: TrainerProcess, out: Path) -> None:
    """The stream, one request at a time; every interval prompts an update, swapped in; the held-out curve."""
    cfg, s = r.cfg, r.session
    new = cfg.new_domain()
    outbox = Outbox(out / "outbox.sqlite")
    uploader = Uploader(outbox, trainer.url, interval_s=0.5, token=trainer.token).start()
    s.registry = trainer.registry
    try:
        for i, item in enumerate(r.items.stream, 1):
            final, record = answer_record(s, item, cfg.max_tokens, cfg.record_topk)
            outbox.put(record)
            uploader.kick()
            st = final.stats
            print(f"prompt {i:3d} [{s.drafter_version}] {st.completion_tokens} tokens, tau {st.tau:.2f}, "
                  f"acceptance {acceptance_text(st.accepted, st.proposed)} ({r.settings.policy} policy)", flush=True)
            update = i % cfg.interval == 0 or i == len(r.items.stream)
            switch = bool(cfg.drift_target) and i == cfg.drift_point() < len(r.items.stream)
            if not (update or switch or cfg.evaluates_at(i)):
                continue
            # every record sent and the trainer idle: at an update boundary its update of these records is in use;
            # at a checkpoint or a target switch between boundaries no update is pending (fewer than an interval
            # of records), so the drafter in use is the last boundary's and what is learned does not depend on
            # which checkpoints were asked for
            uploader.flush(60.0)
            status = trainer.wait_idle()
            t0 = time.perf_counter()
            if s.maybe_swap():
                r.swaps[s.drafter_version] = round(time.perf_counter() - t0, 2)
            elif update and status["last_error"]:
                print(f"update after {i} prompts not published: {status['last_error']}", flush=True)
            if cfg.evaluates_at(i):  # the drafter in use, swapped or not
                r.curve.append(r.measure(r.items.heldout, "curve", new, i))
                if cfg.keep_drafters:
                    r.curve[-1].update(_keep_drafter(r.registry, s.drafter_version, out / "drafters", i))
                trainer.registry.annotate(s.drafter_version, {"heldout": r.curve[-1]})
                if r.items.drift:
                    r.drift_curve.append(r.measure(r.items.drift, "drift", cfg.drift_set, i))
            if switch:
                s = switch_target(r, cfg.drift_target)
                r.curve.append(r.measure(r.items.heldout, "curve", new, i, f"after {i:3d} prompts, target switched "
                                         f"to {cfg.drift_target} [{s.drafter_version}]"))
    finally:
        uploader.stop()


def _keep_drafter(registry: DrafterRegistry, version: str, folder: Path, prompts: int) -> dict:
    """``--keep-drafters``: the published file of the drafter in use, linked into ``folder``.  The trainer keeps
    only its last few versions, so without this the drafters a curve measured are gone by its end; a hard link
    costs no space and outlives the registry's pruning.  The base drafter is the settings' own file: nothing to
    keep."""
    src = registry.path_of(version) if version != "base" else None
    if src is None:
        return {}
    folder.mkdir(parents=True, exist_ok=True)
    dst = folder / f"after-{prompts:04d}-{version}.gguf"
    if not dst.exists():
        try:
            os.link(src, dst)
        except OSError:  # another file system, or one without hard links
            shutil.copyfile(src, dst)
    return {"drafter_file": f"{folder.name}/{dst.name}", "drafter_sha256": registry.meta(version).get("sha256")}


def _report(r: Run, updates: list[dict], out: Path, seconds: float) -> dict:
    for u in updates:
        u["swap_s"] = r.swaps.get(u.get("version"), 0.0)
    result = {"curve": r.curve, "control": r.control, "old": r.old, "updates": updates,
              "drift": {"set": r.cfg.drift_set, "target": r.cfg.drift_target, "at": r.cfg.drift_point(),
                        "curve": r.drift_curve, "control": r.drift_control}
              if r.cfg.drift_set or r.cfg.drift_target else None,
              "summary": _summary(r, updates, seconds),
              "heldout": r.items.heldout, "config": r.cfg.__dict__, "settings": r.settings.__dict__,
              "seconds": round(seconds, 1)}
    result["summary"]["drift_recovery"] = {  # goal 3, from an empty n-gram cache and (if measured) the stream's
        w: drift_recovery(r.curve, r.control, result["drift"], w)
        for w in ("plain", "with_cache") if w == "plain" or r.cfg.eval_with_cache}
    for line in summary_lines(result["summary"]):
        print(line, flush=True)
    (out / "adapt.json").write_text(json.dumps(result, indent=1, default=str))
    path = _report_plot(r.curve, r.control, out / "adapt.png", r.settings, r.old,
                        r.curve[0]["set"] if r.curve else "")
    print(f"{result['seconds']:.0f} s; wrote {out / 'adapt.json'}"
          + (f" and {path}" if path else " (no plot: matplotlib missing)"))
    return result


def _summary(r: Run, updates: list[dict], seconds: float) -> dict:
    """The goals' figures; after a target drift, of the points on the new target against the control on it."""
    curve, control = r.curve, r.control
    if r.cfg.drift_target and r.drift_control is not None:
        curve = [p for p in r.curve if p["target"] == r.cfg.drift_target]
        control = r.drift_control
    return summary(curve, control, r.old, updates, round(seconds, 1), len(r.items.stream))


def _show(pt: dict, label: str = "") -> None:
    head = label or f"after {pt['prompts']:3d} prompts [{pt['version']}]"
    prefix = "held-out" if pt.get("kind", "curve") in ("curve", "control", "drift") else "old domain"
    tau = f"tau {pt['tau']:.3f}" if pt["measured"] else "tau (not measured)"
    k = f"k = {pt['k']}" + (f" (asked {pt['k_asked']}: the target verifies at most {pt['k'] + 1} tokens a pass)"
                            if pt["k"] != pt["k_asked"] else "")
    print(f"{prefix} {head}: acceptance {acceptance_text(pt['accepted'], pt['proposed'])}, {tau} "
          f"({pt['tokens']} tokens in {pt['target_passes']} target passes, {k}, {pt['seconds']:.0f} s)", flush=True)


def _plot(curve: list[dict], control: dict | None, path: Path, settings=None, old: dict | None = None) -> Path | None:
    """The run's plot (``adapt_report.plot``)."""
    return _report_plot(curve, control, path, settings, old)
