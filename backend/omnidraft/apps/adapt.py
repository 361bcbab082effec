"""``omnidraft adapt``: the whole online loop in one process, measured on a fixed held-out slice.

    prompt stream -> speculative generation (record_topk) -> record -> outbox -> HTTP upload
    -> trainer (every I prompts: train, export, check, publish) -> Session.maybe_swap() -> held-out eval

The trainer is its own process (``omnidraft trainer serve`` on a free loopback port), met the way a
server deployment meets it: records posted over HTTP, drafter versions read from its registry on disk.
The loop waits for each update (the trainer's ``/v1/status``) before evaluating, which keeps the
measurements free of training load.  The control is exported by ``omnidraft trainer export``.

The held-out evaluation measures the drafter, nothing else:
* it drafts ``eval_k`` tokens every step (the ``fixed`` policy), whatever policy the stream uses: the
  default ``cost`` policy rightly hardly drafts on a 2-core CPU, which would leave nothing to measure;
* it is greedy, so the text is the target's every time and only the drafting changes;
* every evaluation starts from the same copy of the n-gram cache (as it was before the stream) and
  throws its own additions away, so neither the stream's nor the held-out text's n-grams move the curve;
* a control, the untrained drafter re-exported the way the trainer exports (torch -> GGUF -> the same
  quantization -> the same check), separates the training's gain from the re-quantization's;
* a point with fewer than ``rates.MIN_DRAFTED`` drafted tokens is flagged and not plotted as a rate.

Defaults are the settings measured to raise the held-out curve on a 2-core machine
(docs/BENCHMARKS-HISTORY.md section 2 has the sweep they come from).  The drafter is ``--draft`` (the usual settings' default).
"""

from __future__ import annotations

import copy
import json
import logging
import os
import shutil
import subprocess
import sys
import time
import urllib.request
from dataclasses import dataclass, field
from pathlib import Path

from omnidraft import httpguard
from omnidraft.errors import BadRequest
from omnidraft.spec.generator import GenerationParams
from omnidraft.online.outbox import Outbox, Uploader
from omnidraft.spec.policy import DraftPolicy, PolicyConfig
from omnidraft.spec.stats import GenerationStats
from omnidraft.online.rates import acceptance_text, measured
from omnidraft.online.records import build_record
from omnidraft.online.registry import DrafterRegistry

log = logging.getLogger(__name__)


@dataclass
class AdaptConfig:
    """Settings of ``omnidraft adapt`` (the CLI flags are generated from these fields)."""

    prompts: str = field(default="", metadata={"help": "prompt file (one per line, or a JSON list) sent as chat "
                                                          "messages; the last --n-heldout are held out (replaces "
                                                          "--stream-set)"})
    stream_set: str = field(default="stdlib-code", metadata={"help": "train on this prompt set's stream split "
                                                                     "(humaneval | stdlib-code | docs)"})
    eval_set: str = field(default="", metadata={"help": "evaluate on this prompt set's held-out split "
                                                        "(default: the stream set's)"})
    n_train: int = field(default=16, metadata={"help": "training prompts to stream (cycled if the set is shorter)"})
    n_heldout: int = field(default=4, metadata={"help": "held-out prompts evaluated after each update"})
    interval: int = field(default=8, metadata={"help": "train and swap every this many prompts"})
    max_tokens: int = field(default=48, metadata={"help": "tokens generated per training prompt"})
    eval_max_tokens: int = field(default=32, metadata={"help": "tokens generated per held-out prompt"})
    eval_k: int = field(default=4, metadata={"help": "draft length of the held-out evaluation (fixed policy, "
                                                     "whatever --policy the stream uses)"})
    record_topk: int = field(default=8, metadata={"help": "target top-k kept per position in records"})
    lr: float = field(default=2e-4, metadata={"help": "AdamW learning rate"})
    lam: float = field(default=0.2, metadata={"help": "lambda: weight of the n-gram NLL term"})
    lora_rank: int = field(default=32, metadata={"help": "LoRA rank; 0 = full fine-tuning"})
    qtype: str = field(default="q8_0", metadata={"help": "quantization of published drafters ('' = the base's)"})
    baseline: bool = field(default=True, metadata={"help": "evaluate the base drafter before training (off: "
                                                           "sweep points after one run that measured it)"})
    control: bool = field(default=True, metadata={"help": "also evaluate the untrained drafter re-exported the "
                                                          "same way (the control line)"})
    out: str = field(default="adapt-out", metadata={"help": "directory for the trainer state, outbox, JSON and "
                                                            "plot (a previous run there is replaced)"})


Prompt = tuple[str, bool]  # (text, send through the chat template?)


def load_items(cfg: AdaptConfig) -> tuple[list[Prompt], list[Prompt]]:
    """(training stream, held-out) prompts, from --prompts (chat messages) or from a prompt set."""
    if cfg.prompts:
        prompts = load_prompts(cfg.prompts)
        if len(prompts) <= cfg.n_heldout:
            raise ValueError(f"need more than {cfg.n_heldout} prompts, have {len(prompts)}")
        heldout, pool = prompts[-cfg.n_heldout:], prompts[: -cfg.n_heldout]
        return [(pool[i % len(pool)], True) for i in range(cfg.n_train)], [(p, True) for p in heldout]
    from omnidraft.bench import prompts as sets

    stream = [(i.prompt, i.chat) for i in sets.load(cfg.stream_set).split("stream")]
    held = [(i.prompt, i.chat) for i in sets.load(cfg.eval_set or cfg.stream_set).split("heldout")]
    return [stream[i % len(stream)] for i in range(cfg.n_train)], held[: cfg.n_heldout]


def prompt_input(gen, item: Prompt):
    text, chat = item
    return gen.prompt_from_messages([{"role": "user", "content": text}]) if chat else gen.prompt_from_text(text)


def load_prompts(path: str) -> list[str]:
    text = Path(path).read_text()
    if text.lstrip().startswith("["):
        return [str(p) for p in json.loads(text)]
    return [line.strip() for line in text.splitlines() if line.strip()]


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
        pin = prompt_input(gen, p)
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


def _trainer_cli(*args: str) -> list[str]:
    """argv of ``omnidraft <args>`` in a child Python that imports this same package."""
    return [sys.executable, "-m", "omnidraft.apps.cli", *args]


def _child_env() -> dict:
    root = str(Path(__file__).resolve().parents[2])  # the directory holding this package (apps/ -> omnidraft/ -> it)
    return {**os.environ, "PYTHONPATH": os.pathsep.join(p for p in (root, os.environ.get("PYTHONPATH")) if p)}


def export_control(base: str, qtype: str, out_dir: Path, threads: int = 0) -> tuple[Path, dict]:
    """The untrained drafter through the trainer's export path (``omnidraft trainer export``, its own process):
    GGUF -> torch -> GGUF ``qtype`` -> check."""
    argv = _trainer_cli("trainer", "export", "--base", base, "--out", str(out_dir / f"control-{qtype or 'base'}.gguf"),
                        "--qtype", qtype, "--threads", str(threads))
    done = subprocess.run(argv, capture_output=True, text=True, env=_child_env())
    if done.returncode != 0:
        raise RuntimeError(f"trainer export failed ({done.returncode}): {done.stderr[-2000:]}")
    meta = json.loads(done.stdout.strip().splitlines()[-1])
    path = Path(meta.pop("path"))
    if not qtype:  # named after the quantization it got, like the trainer's
        path = path.rename(out_dir / f"control-{meta['qtype']}.gguf")
    return path, meta


class TrainerProcess:
    """``omnidraft trainer serve`` as a child process on a free loopback port.  Adapt meets it as a server
    does: records posted to it (Uploader), versions read from its registry on disk; ``/v1/status`` says
    when an update is done."""

    def __init__(self, state_dir: Path, options: list[str], log_path: Path, start_s: float = 120.0):
        self.state_dir = state_dir
        self._log = open(log_path, "w")
        self.proc = subprocess.Popen(_trainer_cli("trainer", "serve", "--state-dir", str(state_dir), "--port", "0",
                                                  *options), stdout=self._log, stderr=subprocess.STDOUT,
                                     env=_child_env())
        self.updates: dict[int, dict] = {}  # update number -> its metadata, as the trainer reported it
        try:
            self.url = self._wait_url(log_path, start_s)
        except BaseException:
            self.stop()
            raise
        self.token = httpguard.read_token(state_dir / httpguard.TOKEN_FILE)
        self.registry = DrafterRegistry(state_dir / "registry")

    def _wait_url(self, log_path: Path, start_s: float) -> str:
        end = time.monotonic() + start_s
        while time.monotonic() < end:
            for line in log_path.read_text().splitlines():
                if line.startswith("trainer on http://"):
                    return line.split()[2]
            if self.proc.poll() is not None:
                raise RuntimeError(f"the trainer exited ({self.proc.returncode}): {log_path.read_text()[-2000:]}")
            time.sleep(0.1)
        raise RuntimeError(f"the trainer did not start within {start_s:.0f} s (log: {log_path})")

    def status(self) -> dict:
        req = urllib.request.Request(self.url + "/v1/status", headers={"Authorization": f"Bearer {self.token}"})
        with urllib.request.urlopen(req, timeout=10) as resp:
            st = json.loads(resp.read())
        self.updates.update({m["update"]: m for m in st.get("history", [])})
        return st

    def wait_idle(self, timeout: float = 600.0) -> dict:
        """Block until no update is pending or running; the trainer's last status."""
        end = time.monotonic() + timeout
        st = self.status()
        while time.monotonic() < end and (st["busy"] or st["untrained"] >= st["interval"]):
            time.sleep(0.2)
            st = self.status()
        return st

    def history(self) -> list[dict]:
        return [self.updates[n] for n in sorted(self.updates)]

    def stop(self) -> None:
        if self.proc.poll() is None:
            self.proc.terminate()
            try:
                self.proc.wait(30)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()
        self._log.close()


def _fresh(out: Path) -> None:
    """A run starts from the base drafter: a previous run's trainer state and results in ``out`` go."""
    for name in ("trainer", "trainer.log", "outbox.sqlite", "adapt.json", "adapt.png"):
        p = out / name
        if p.is_dir():
            shutil.rmtree(p)
        elif p.exists():
            p.unlink()
    for p in out.glob("control-*.gguf"):
        p.unlink()


def run(cfg: AdaptConfig, settings, threads: int = 0) -> dict:
    from omnidraft.runtime.session import Session

    out = Path(cfg.out)
    out.mkdir(parents=True, exist_ok=True)
    _fresh(out)
    train, heldout = load_items(cfg)
    t_start = time.perf_counter()

    session = Session(settings).warm_up()
    if session.pair is None:
        session.close()
        raise BadRequest(f"adapt trains a drafter model; method {settings.method!r} has none")
    ngram0 = copy.deepcopy(session.pair.cache)  # every evaluation starts from this
    ev_args = (heldout, cfg.eval_max_tokens, cfg.eval_k, ngram0)
    curve: list[dict] = []
    control = None
    trainer = uploader = None
    try:
        if cfg.baseline:
            curve.append({"prompts": 0, "version": "base", **evaluate(session, *ev_args)})
            _show(curve[-1])
        if cfg.control:
            path, meta = export_control(settings.draft, cfg.qtype, out, threads)
            session.load_drafter(str(path))
            control = {"version": f"control ({meta['qtype']}, untrained)", **meta, **evaluate(session, *ev_args)}
            session.load_drafter(settings.draft)
            _show(control, "control")
        trainer = TrainerProcess(out / "trainer", [
            "--base", settings.draft, "--interval", str(cfg.interval), "--lam", str(cfg.lam), "--lr", str(cfg.lr),
            "--lora-rank", str(cfg.lora_rank), "--qtype", cfg.qtype, "--threads", str(threads)], out / "trainer.log")
        outbox = Outbox(out / "outbox.sqlite")
        uploader = Uploader(outbox, trainer.url, interval_s=0.5, token=trainer.token).start()
        session.registry = trainer.registry
        for i, item in enumerate(train, 1):
            gen = session.generator()
            pin = prompt_input(gen, item)
            final = gen.generate(pin, GenerationParams(max_tokens=cfg.max_tokens, record_topk=cfg.record_topk))
            outbox.put(build_record(final, pin, session.pair, gen.method, session.drafter_version))
            uploader.kick()
            s = final.stats
            print(f"prompt {i:3d} [{session.drafter_version}] {s.completion_tokens} tokens, tau {s.tau:.2f}, "
                  f"acceptance {acceptance_text(s.accepted, s.proposed)} ({settings.policy} policy)", flush=True)
            if i % cfg.interval == 0:
                uploader.flush(60.0)
                status = trainer.wait_idle()
                if session.maybe_swap():
                    ev = evaluate(session, *ev_args)
                    curve.append({"prompts": i, "version": session.drafter_version, **ev})
                    trainer.registry.annotate(session.drafter_version, {"heldout": ev})
                    _show(curve[-1])
                elif status["last_error"]:
                    print(f"update after {i} prompts not published: {status['last_error']}", flush=True)
    finally:
        if uploader is not None:
            uploader.stop()
        if trainer is not None:
            trainer.stop()
        session.save_state()
        session.close()
    result = {"curve": curve, "control": control, "updates": trainer.history(), "heldout": heldout,
              "config": cfg.__dict__, "settings": settings.__dict__,
              "seconds": round(time.perf_counter() - t_start, 1)}
    (out / "adapt.json").write_text(json.dumps(result, indent=1, default=str))
    plot = _plot(curve, control, out / "adapt.png", settings)
    print(f"{result['seconds']:.0f} s; wrote {out / 'adapt.json'}"
          + (f" and {plot}" if plot else " (no plot: matplotlib missing)"))
    return result


def _show(pt: dict, label: str = "") -> None:
    head = label or f"after {pt['prompts']:3d} prompts [{pt['version']}]"
    tau = f"tau {pt['tau']:.3f}" if pt["measured"] else "tau (not measured)"
    k = f"k = {pt['k']}" + (f" (asked {pt['k_asked']}: the target verifies at most {pt['k'] + 1} tokens a pass)"
                            if pt["k"] != pt["k_asked"] else "")
    print(f"held-out {head}: acceptance {acceptance_text(pt['accepted'], pt['proposed'])}, {tau} "
          f"({pt['tokens']} tokens in {pt['target_passes']} target passes, {k}, {pt['seconds']:.0f} s)", flush=True)


def _plot(curve: list[dict], control: dict | None, path: Path, settings=None) -> Path | None:
    try:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        return None
    ok = [p for p in curve if p["measured"]]
    low = [p for p in curve if not p["measured"]]
    x = [p["prompts"] for p in ok]
    fig, (ax1, ax2) = plt.subplots(1, 2, figsize=(9, 3.6))
    ax1.plot(x, [100 * p["acceptance"] for p in ok], "o-", color="tab:blue", label="trained drafter")
    for p in ok:
        ax1.annotate(f"{p['accepted']}/{p['proposed']}", (p["prompts"], 100 * p["acceptance"]), fontsize=7,
                     textcoords="offset points", xytext=(0, 6), ha="center")
    ax2.plot(x, [p["tau"] for p in ok], "s-", color="tab:orange", label="trained drafter")
    if control is not None and control["measured"]:
        ax1.axhline(100 * control["acceptance"], ls="--", color="grey",
                    label=f"control: untrained, {control['qtype']} ({control['accepted']}/{control['proposed']})")
        ax2.axhline(control["tau"], ls="--", color="grey", label=f"control: untrained, {control['qtype']}")
    if low:
        ax1.plot([p["prompts"] for p in low], [0] * len(low), "x", color="red", clip_on=False,
                 label="too few drafted tokens (not a rate)")
    ax1.set_xlabel("training prompts seen")
    ax1.set_ylabel("held-out acceptance (%)")
    ax2.set_xlabel("training prompts seen")
    ax2.set_ylabel("tokens per target pass (tau)")
    k = curve[0]["k"] if curve else "?"
    pair = f"{settings.draft} -> {settings.target}, " if settings is not None else ""
    fig.suptitle(f"omnidraft adapt: {pair}held-out, greedy, k = {k}", fontsize=10)
    # a curve within noise must look flat: never zoom in past 10 acceptance points / 0.25 tokens per pass
    for ax, span in ((ax1, 10.0), (ax2, 0.25)):
        lo, hi = ax.get_ylim()
        if hi - lo < span:
            mid = (lo + hi) / 2
            ax.set_ylim(mid - span / 2, mid + span / 2)
    for ax in (ax1, ax2):
        ax.legend(fontsize=7, loc="lower right")
        ax.grid(alpha=0.3)
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)
    return path
