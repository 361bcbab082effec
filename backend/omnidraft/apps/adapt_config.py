"""``omnidraft adapt``'s settings: one dataclass, from which the CLI flags are generated (``adapt_scenarios``
names sets of them)."""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path


@dataclass
class AdaptConfig:
    """Settings of ``omnidraft adapt`` (the CLI flags are generated from these fields)."""

    prompts: str = field(default="", metadata={"help": "prompt file (one per line, or a JSON list) sent as chat "
                                                          "messages; the last --n-heldout are held out (replaces "
                                                          "--stream-set)"})
    stream_set: str = field(default="javascript", metadata={"help": "train on this prompt set's stream split "
                                                                    "(javascript: the language | npm-cli, undici: "
                                                                    "one repository | nl-fr, nl-de, nl-nl: a "
                                                                    "natural language | humaneval | ...)"})
    eval_set: str = field(default="", metadata={"help": "evaluate on this prompt set's held-out split "
                                                        "(default: the stream set's)"})
    old_sets: str = field(default="stdlib-code,chat", metadata={
        "help": "the old domains: their held-out prompts are measured before and after the stream, and their "
                "stream prompts' records are replayed ('' = neither)"})
    n_train: int = field(default=64, metadata={"help": "training prompts to stream (cycled if the set is shorter)"})
    n_heldout: int = field(default=32, metadata={"help": "held-out prompts of the new domain, evaluated after "
                                                         "updates"})
    n_old: int = field(default=16, metadata={"help": "held-out prompts per old domain (before and after)"})
    interval: int = field(default=8, metadata={"help": "train and swap every this many prompts"})
    eval_every: int = field(default=16, metadata={"help": "evaluate the held-out prompts every this many prompts "
                                                          "(and after the last)"})
    max_tokens: int = field(default=64, metadata={"help": "tokens generated per training prompt"})
    eval_max_tokens: int = field(default=48, metadata={"help": "tokens generated per held-out prompt"})
    eval_k: int = field(default=4, metadata={"help": "draft length of the held-out evaluation (fixed policy, "
                                                     "whatever --policy the stream uses)"})
    eval_with_cache: bool = field(default=False, metadata={
        "help": "also measure each held-out point from a copy of the stream's n-gram cache as it stands (the "
                "server's), beside the empty one: what the cache adds, e.g. to a drift's recovery"})
    keep_drafters: bool = field(default=False, metadata={
        "help": "keep the drafter measured at each held-out point as DIR/drafters/after-NNNN-VERSION.gguf (a hard "
                "link where it can be; the trainer itself keeps only its last few versions), so that the curve's "
                "drafters can be timed later, e.g. on another machine"})
    record_topk: int = field(default=8, metadata={"help": "target top-k kept per position in records"})
    # the trainer's default update, LoRA of rank 16 at lr 1e-3 (why: trainer.service.TrainerConfig)
    lr: float = field(default=1e-3, metadata={"help": "AdamW learning rate"})
    lam: float = field(default=0.2, metadata={"help": "lambda: weight of the n-gram NLL term"})
    lora_rank: int = field(default=16, metadata={"help": "LoRA rank; 0 = full fine-tuning of the layers"})
    epochs: int = field(default=2, metadata={"help": "passes over each update's new records"})
    prompt_lam: float = field(default=0.5, metadata={"help": "weight of the prompt's teacher-forced NLL"})
    recent: int = field(default=64, metadata={"help": "records of earlier updates each update draws from (the "
                                                      "new domain's own history; 0 = none)"})
    recent_ratio: float = field(default=1.0, metadata={"help": "steps on those per new record in an update"})
    micro_batch: int = field(default=1, metadata={"help": "records per optimizer step, in one padded forward (1 = "
                                                      "a step per record)"})
    n_replay: int = field(default=16, metadata={"help": "replay records per old domain (from its stream split)"})
    replay_ratio: float = field(default=0.5, metadata={"help": "replay steps per new record in an update"})
    qtype: str = field(default="q8_0", metadata={"help": "quantization of published drafters ('' = the base's)"})
    baseline: bool = field(default=True, metadata={"help": "evaluate the base drafter before training (off: "
                                                           "sweep points after one run that measured it)"})
    control: bool = field(default=True, metadata={"help": "also evaluate the untrained drafter re-exported the "
                                                          "same way (the control line)"})
    out: str = field(default="adapt-out", metadata={"help": "directory for the trainer state, outbox, JSON and "
                                                            "plot (a previous run there is replaced)"})
    scenario: str = field(default="", metadata={"help": "a named scenario of issue 43 (unseen-code, unseen-chat, "
                                                        "repo, language, drift-domain, ...: adapt_scenarios.py): "
                                                        "its settings, under any flag given explicitly"})
    checkpoints: str = field(default="", metadata={"help": "evaluate the held-out prompts after these numbers of "
                                                           "stream prompts (comma-separated, e.g. 64,128,256; '' = "
                                                           "every --eval-every); one between two updates measures "
                                                           "the drafter in use then, the last update's"})
    drift_set: str = field(default="", metadata={"help": "drift: after --drift-at stream prompts the stream switches "
                                                         "to this prompt set; its held-out prompts are measured "
                                                         "beside the first set's at every evaluation"})
    drift_target: str = field(default="", metadata={"help": "drift: after --drift-at stream prompts the target "
                                                            "becomes this model (one of the same vocabulary: "
                                                            "qwen2.5-coder-0.5b <-> 1.5b); the held-out prompts are "
                                                            "measured with it from then on, first right at the switch"})
    drift_at: int = field(default=0, metadata={"help": "stream prompts before the drift (0 = half of --n-train)",
                                               "range": (0, 10 ** 9)})
    trainer_device: str = field(default="cpu", metadata={"help": "torch device of the trainer's steps (cpu | cuda)"})
    verify_batch: int = field(default=0, metadata={"help": "force verification batches of up to this many rows (0 = "
                                                           "the start-up plan's: on a GPU build it allows 3, which "
                                                           "caps --eval-k at 2; forced rows may differ from the "
                                                           "target alone's in the last bits)"})

    def evaluates_at(self, i: int) -> bool:
        """Whether the held-out prompts are measured after ``i`` stream prompts (the last always is)."""
        if i == self.n_train:
            return True
        if self.checkpoints:
            return i in {int(x) for x in self.checkpoints.split(",") if x.strip()}
        return i % self.eval_every == 0

    def drift_point(self) -> int:
        """Stream prompts before the drift (``n_train``: no drift)."""
        if not self.drift_set and not self.drift_target:
            return self.n_train
        return min(self.drift_at or self.n_train // 2, self.n_train)

    def new_domain(self) -> str:
        """The name of the held-out set the curve measures."""
        return "prompts" if self.prompts else self.eval_set or self.stream_set

    def trainer_options(self, base: str, threads: int, replay: Path | None) -> list[str]:
        """``omnidraft trainer serve`` flags for these settings."""
        opts = {"--base": base, "--interval": self.interval, "--lam": self.lam, "--lr": self.lr,
                "--lora-rank": self.lora_rank, "--epochs": self.epochs, "--prompt-lam": self.prompt_lam,
                "--replay-ratio": self.replay_ratio, "--recent": self.recent, "--recent-ratio": self.recent_ratio,
                "--micro-batch": self.micro_batch, "--qtype": self.qtype, "--threads": threads,
                "--device": self.trainer_device,
                "--replay": replay or ""}
        return [str(x) for kv in opts.items() for x in kv]
