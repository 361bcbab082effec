"""What a stream memory would add on ``omnidraft adapt``'s default scenario (issue 26), measured before it is built.

    flock /tmp/cpu.lock python scripts/lab/memory_lab.py --e2e 3-frequent-c2,2-frequent,3-frequent
    flock /tmp/cpu.lock python scripts/lab/memory_lab.py --stream-set npm-cli --e2e 3-frequent-c2,2-frequent --no-old \
        --out results/memory-lab-npm-cli.json

A stream memory (``StreamMemory`` below; measured, not built into the package: BENCHMARKS.md, Adaptation)
keeps completed requests as target tokens (prompt + the target's output) and drafts, like prompt lookup but
across requests (REST, He et al. 2023; SuffixDecoding, Oliaro et al. 2024), what followed the longest suffix
match: the most recent continuation, or the greedy path of the most frequent next tokens.  Here:

1. the target's greedy outputs for adapt's 64 JavaScript stream prompts and its 32 held-out prompts (greedy:
   the text is the target's whichever drafter drafts; cached under the model cache's ``memory-lab/``);
2. ``sim``: on the held-out outputs, teacher-forced at every position: how often context lookup (the hybrid's,
   n-gram 2-4) fires, how often the memory fires where it does not, and how many of the memory's k = 4 tokens
   the target would accept, for each match length and continuation rule (seconds, no model);
3. ``e2e``: held-out acceptance and tau measured as ``adapt.evaluate`` measures them (fixed k = 4, greedy, an
   empty n-gram cache, the base drafter), for the drafter alone (``omnidraft``, adapt's method), memory then
   drafter, context lookup then drafter (``hybrid``), and lookup then memory then drafter; and the old
   domains (Python code, chat) with and without the JavaScript memory.
"""

from __future__ import annotations

import argparse
import hashlib
import json
import sys
import time
from collections import Counter, deque
from dataclasses import dataclass, field
from pathlib import Path
from typing import Sequence

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "backend"))

from omnidraft.apps.adapt import DEFAULT_TARGET, AdaptConfig  # noqa: E402
from omnidraft.apps.adapt_items import load_items, load_old  # noqa: E402
from omnidraft.assets import models  # noqa: E402
from omnidraft.speculative.drafters import DraftCounters, prompt_lookup  # noqa: E402
from omnidraft.speculative.step import Draft, Verdict  # noqa: E402
from omnidraft.speculative.generator import GenerationParams  # noqa: E402
from omnidraft.speculative.policy import DraftPolicy, PolicyConfig  # noqa: E402
from omnidraft.speculative.stats import GenerationStats  # noqa: E402
from omnidraft.vocab.translator import LOOKUP, Candidates  # noqa: E402

K = 4


# ---------------------------------------------------------------- the memory under test (not built: BENCHMARKS)
RULES = ("recent", "frequent")


@dataclass(frozen=True)
class MemoryConfig:
    """How the stream memory matches and how much it keeps."""

    min_match: int = field(default=2, metadata={"help": "shortest context suffix (tokens) the memory matches"})
    max_match: int = field(default=8, metadata={"help": "longest suffix compared; longer matches win"})
    max_tokens: int = field(default=262144, metadata={"help": "tokens kept; the oldest requests go past it"})
    max_hits: int = field(default=64, metadata={"help": "most recent occurrences kept per indexed n-gram"})
    rule: str = field(default="frequent", metadata={"help": "continuation of the longest matches: recent|frequent"})
    min_count: int = field(default=1, metadata={"help": "frequent rule: stop where the next token was seen after "
                                                        "fewer of the matches than this"})

    def __post_init__(self):
        if not 1 <= self.min_match <= self.max_match:
            raise ValueError(f"need 1 <= min_match <= max_match, have {self.min_match}, {self.max_match}")
        if self.rule not in RULES:
            raise ValueError(f"rule {self.rule!r}: choose from {', '.join(RULES)}")


class StreamMemory:
    """Sequences of target ids, oldest first, with an index of the ``min_match``-grams they contain."""

    def __init__(self, target_fp: str, config: MemoryConfig | None = None):
        self.target_fp, self.cfg = target_fp, config or MemoryConfig()  # target_fp: the vocabulary its ids are of
        self._seqs: dict[int, list[int]] = {}  # sequence number -> its ids, in insertion order
        self._next = 0
        self._tokens = 0
        self._index: dict[tuple[int, ...], deque[tuple[int, int]]] = {}  # n-gram -> (seq, end) most recent last

    def __len__(self) -> int:
        return len(self._seqs)

    @property
    def tokens(self) -> int:
        return self._tokens

    def add(self, ids: Sequence[int]) -> None:
        """Keep one sequence (a request's prompt and output); the oldest go past the bound."""
        ids = [int(t) for t in ids]
        n = self.cfg.min_match
        if len(ids) <= n:
            return
        s = self._next
        self._next += 1
        self._seqs[s] = ids
        self._tokens += len(ids)
        for end in range(n, len(ids)):  # an n-gram that something followed
            hits = self._index.setdefault(tuple(ids[end - n:end]), deque(maxlen=self.cfg.max_hits))
            hits.append((s, end))
        while self._tokens > self.cfg.max_tokens and len(self._seqs) > 1:
            self._evict()

    def _evict(self) -> None:
        s = next(iter(self._seqs))
        ids = self._seqs.pop(s)
        self._tokens -= len(ids)
        n = self.cfg.min_match
        for end in range(n, len(ids)):
            key = tuple(ids[end - n:end])
            hits = self._index.get(key)
            while hits and hits[0][0] == s:  # hits are in insertion order: the oldest sequence's come first
                hits.popleft()
            if hits is not None and not hits:
                del self._index[key]

    def lookup(self, context: Sequence[int], k: int) -> list[int]:
        """Up to k tokens that followed the longest suffix of ``context`` found in the memory ([] if none)."""
        n, top = self.cfg.min_match, self.cfg.max_match
        if k <= 0 or len(context) < n:
            return []
        hits = self._index.get(tuple(context[-n:]))
        if not hits:
            return []
        best, found = 0, []  # the longest match length, and (seq, end) of the matches that long
        tail = list(context[-top:])
        for s, end in hits:
            seq = self._seqs[s]
            m = n
            while m < len(tail) and end - m > 0 and seq[end - m - 1] == tail[-m - 1]:
                m += 1
            if m > best:
                best, found = m, [(s, end)]
            elif m == best:
                found.append((s, end))
        if self.cfg.rule == "recent":
            s, end = found[-1]
            return self._seqs[s][end:end + k]
        return self._frequent(found, k)

    def _frequent(self, found: list[tuple[int, int]], k: int) -> list[int]:
        """The greedy path of the most frequent next token over the matches (ties: the most recent)."""
        out: list[int] = []
        live = found
        while len(out) < k:
            nexts = [(s, end) for s, end in live if end + len(out) < len(self._seqs[s])]
            if not nexts:
                break
            counts = Counter(self._seqs[s][end + len(out)] for s, end in nexts)
            top = max(counts.values())
            if top < self.cfg.min_count:
                break
            tok = next(self._seqs[s][end + len(out)] for s, end in reversed(nexts)
                       if counts[self._seqs[s][end + len(out)]] == top)
            out.append(tok)
            live = [(s, end) for s, end in nexts if self._seqs[s][end + len(out) - 1] == tok]
        return out


def target_outputs(session, items, max_tokens: int, name: str) -> list[dict]:
    """[{prompt ids, output ids}] of the target alone, greedy; cached by target, prompts and length."""
    key = hashlib.sha256(json.dumps([Path(session.target.path).name, items, max_tokens]).encode()).hexdigest()[:20]
    path = models.cache_dir() / "memory-lab" / f"{name}-{key}.json"
    if path.is_file():
        return json.loads(path.read_text())
    gen = session.compose("target", None, DraftPolicy(PolicyConfig(name="fixed", k=1)))
    out = []
    for it in items:
        pin = gen.prompt_for(*it)
        f = gen.generate(pin, GenerationParams(max_tokens=max_tokens))
        out.append({"prompt": list(pin.target_ids), "output": [int(t) for t in f.token_ids]})
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(out))
    return out


def build_memory(stream: list[dict], target_fp: str, cfg: MemoryConfig) -> StreamMemory:
    mem = StreamMemory(target_fp, cfg)
    for r in stream:
        mem.add(r["prompt"] + r["output"])
    return mem


def sim(stream: list[dict], heldout: list[dict], target_fp: str, cfg: MemoryConfig, use_lookup: bool) -> dict:
    """Teacher-forced at every held-out output position: the context lookup's and the memory's drafts of K tokens,
    and how many of each the target's text confirms (a greedy draft is accepted up to its first difference)."""
    mem = build_memory(stream, target_fp, cfg)
    c = {"positions": 0, "lookup_fires": 0, "lookup_proposed": 0, "lookup_accepted": 0,
         "memory_fires": 0, "memory_proposed": 0, "memory_accepted": 0, "memory_first_ok": 0}
    for r in heldout:
        ctx, out = r["prompt"], r["output"]
        for i in range(len(out) - 1):
            c["positions"] += 1
            context = ctx + out[:i]
            truth = out[i:i + K]
            if use_lookup:
                d = prompt_lookup(context, K, 4, 2)
                if d:
                    c["lookup_fires"] += 1
                    c["lookup_proposed"] += len(d)
                    c["lookup_accepted"] += _agree(d, truth)
                    continue
            d = mem.lookup(context, K)
            if d:
                c["memory_fires"] += 1
                c["memory_proposed"] += len(d)
                a = _agree(d, truth)
                c["memory_accepted"] += a
                c["memory_first_ok"] += a > 0
    c["memory_fire_rate"] = round(c["memory_fires"] / c["positions"], 4)
    c["memory_acceptance"] = round(c["memory_accepted"] / max(1, c["memory_proposed"]), 4)
    c["memory_first_precision"] = round(c["memory_first_ok"] / max(1, c["memory_fires"]), 4)
    c["lookup_fire_rate"] = round(c["lookup_fires"] / c["positions"], 4)
    c["lookup_acceptance"] = round(c["lookup_accepted"] / max(1, c["lookup_proposed"]), 4)
    return c


def _agree(draft: Sequence[int], truth: Sequence[int]) -> int:
    n = 0
    for a, b in zip(draft, truth):
        if a != b:
            break
        n += 1
    return n


class LabDrafter:
    """The composition under test: context lookup (optional), then the memory (optional), then the model."""

    window = 0  # its model reads the whole prompt

    def __init__(self, model, memory: StreamMemory | None, use_lookup: bool):
        self.name, self.model, self.memory, self.use_lookup = "lab", model, memory, use_lookup
        self.tokens: list[int] = []
        self.counters = DraftCounters()
        self.last = ""
        self.by = {s: {"drafts": 0, "proposed": 0, "accepted": 0} for s in ("lookup", "memory", "model")}

    def begin(self, prompt) -> None:
        self.tokens = list(prompt.target_ids)
        self.model.begin(prompt)

    def draft(self, k: int, stop) -> Draft:
        for src, found in (("lookup", self.use_lookup and prompt_lookup(self.tokens, k, 4, 2)),
                           ("memory", self.memory is not None and self.memory.lookup(self.tokens, k))):
            if found:
                c = Candidates()
                for i, t in enumerate(found):
                    c.add(t, LOOKUP, (i, i + 1), 1.0)
                return self._count(src, Draft(c))
        return self._count("model", self.model.draft(k, stop))

    def _count(self, src: str, d: Draft) -> Draft:
        self.last = src
        self.by[src]["drafts"] += 1
        self.by[src]["proposed"] += len(d.candidates)
        return d

    def accept(self, verdict: Verdict) -> None:
        self.by[self.last]["accepted"] += verdict.accepted
        self.tokens.extend(verdict.tokens)
        self.model.accept(verdict)

    def stats(self) -> dict:
        return self.model.stats()


def e2e(session, prompts, max_tokens: int, memory: StreamMemory | None, use_lookup: bool) -> dict:
    """``adapt.evaluate``'s measurement with the lab's composition (fixed k, greedy, empty n-gram cache)."""
    import copy

    from omnidraft.speculative.generator import Generator
    from omnidraft.speculative.methods import make_drafter
    from omnidraft.vocab.ngram_cache import NGramCache

    pair = copy.copy(session.pair)
    pair.cache = NGramCache(pair.bridge.draft_fp, pair.bridge.target_fp)
    drafter = LabDrafter(make_drafter("omnidraft", pair), memory, use_lookup)
    gen = Generator(session.target, drafter, DraftPolicy(PolicyConfig(name="fixed", k=K)), "omnidraft",
                    session.max_verify_batch, session.plan.guard)
    total = GenerationStats("lab")
    t0 = time.perf_counter()
    for p in prompts:
        f = gen.generate(gen.prompt_for(*p), GenerationParams(max_tokens=max_tokens))
        total.add(f.stats)
    return {"acceptance": round(total.acceptance_rate, 4), "tau": round(total.tau, 4), "accepted": total.accepted,
            "proposed": total.proposed, "tokens": total.completion_tokens, "target_passes": total.target_passes,
            "by_source": drafter.by, "seconds": round(time.perf_counter() - t0, 1)}


def _config(spec: str) -> MemoryConfig:
    """'3-frequent' or '4-frequent-c2' (min_match, rule, min_count) as a MemoryConfig."""
    n, rule, *count = spec.split("-")
    return MemoryConfig(min_match=int(n), max_match=max(8, int(n)), rule=rule,
                        min_count=int(count[0][1:]) if count else 1)


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--out", default="results/memory-lab.json")
    ap.add_argument("--threads", type=int, default=0)
    ap.add_argument("--e2e", default="2-frequent,3-frequent",
                    help="memory configs measured end to end: min_match-rule[-cMIN_COUNT], e.g. 3-frequent-c2 "
                         "('' = sim only)")
    ap.add_argument("--no-old", action="store_true", help="skip the old domains")
    ap.add_argument("--stream-set", default="javascript", help="adapt's --stream-set (javascript | npm-cli | undici)")
    a = ap.parse_args()
    from omnidraft.runtime.session import Session, Settings

    cfg = AdaptConfig(stream_set=a.stream_set)
    stream_items, held_items = load_items(cfg)
    old_items, _ = load_old(cfg)
    settings = Settings(target=DEFAULT_TARGET, policy="fixed", threads=a.threads)
    session = Session(settings).warm_up()
    fp = session.pair.bridge.target_fp
    t0 = time.perf_counter()
    stream = target_outputs(session, stream_items, cfg.max_tokens, "stream")
    held = target_outputs(session, held_items, cfg.eval_max_tokens, "heldout")
    print(f"target outputs: {len(stream)} stream, {len(held)} held-out ({time.perf_counter() - t0:.0f} s)", flush=True)
    res: dict = {"target": DEFAULT_TARGET, "draft": settings.draft, "k": K, "stream_set": cfg.stream_set,
                 "n_stream": len(stream), "n_heldout": len(held), "stream_tokens": sum(len(r["prompt"]) + len(r["output"])
                                                                                    for r in stream),
                 "sim": {}, "e2e": {}, "old": {}}
    grid = [(n, rule, 1) for n in (2, 3, 4) for rule in ("recent", "frequent")]
    grid += [(n, "frequent", c) for n in (2, 3, 4, 6, 8) for c in (2, 3, 4)]  # a confidence gate: seen c+ times
    for use_lookup in (False, True):
        for n, rule, count in grid:
            name = f"{'lookup+' if use_lookup else ''}{n}-{rule}" + (f"-c{count}" if count > 1 else "")
            mc = MemoryConfig(min_match=n, max_match=max(8, n), rule=rule, min_count=count)
            res["sim"][name] = s = sim(stream, held, fp, mc, use_lookup)
            print(f"sim {name}: memory fires at {s['memory_fire_rate']:.1%} of positions, its drafts accepted "
                  f"{s['memory_acceptance']:.1%} ({s['memory_accepted']}/{s['memory_proposed']}), first token "
                  f"right {s['memory_first_precision']:.1%}"
                  + (f"; lookup fires {s['lookup_fire_rate']:.1%}, accepted {s['lookup_acceptance']:.1%}"
                     if use_lookup else ""), flush=True)
    runs = [("omnidraft", None, False), ("hybrid", None, True)] if a.e2e else []
    for spec in filter(None, a.e2e.split(",")):
        mem = build_memory(stream, fp, _config(spec))
        runs += [(f"memory {spec}", mem, False), (f"lookup+memory {spec}", mem, True)]
    for name, mem, lk in runs:
        res["e2e"][name] = r = e2e(session, held_items, cfg.eval_max_tokens, mem, lk)
        print(f"e2e {name}: acceptance {r['acceptance']:.1%}, tau {r['tau']:.3f}, by source {r['by_source']} "
              f"({r['seconds']} s)", flush=True)
    if not a.no_old:
        spec = a.e2e.split(",")[0] if a.e2e else "2-frequent"
        mem = build_memory(stream, fp, _config(spec))
        for dom, prompts in old_items.items():
            for name, m in (("omnidraft", None), (f"memory {spec}", mem)):
                res["old"][f"{dom} {name}"] = r = e2e(session, prompts, cfg.eval_max_tokens, m, False)
                print(f"old {dom} {name}: acceptance {r['acceptance']:.1%}, tau {r['tau']:.3f}, "
                      f"by source {r['by_source']}", flush=True)
    session.close()
    Path(a.out).write_text(json.dumps(res, indent=1))
    print(f"wrote {a.out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
