"""Speculative methods by name: each is a composition of an engine and a translator.

| method          | drafter                 | translation                                       |
|-----------------|-------------------------|---------------------------------------------------|
| target          | none                    | -                                                 |
| prompt-lookup   | n-gram lookup in context| target ids already                                |
| same-vocab      | model, same vocabulary  | identity (the reference that needs no translation) |
| tli             | model, shared vocab only| direct map (Timor et al. 2025)                    |
| slem            | model                   | text re-tokenisation (HF universal assisted gen.) |
| omnidraft       | model                   | n-gram cache + direct map + re-tokenisation       |
| hybrid          | lookup first, else model| free drafts from the context; omnidraft otherwise |
"""

from __future__ import annotations

from typing import Callable


from omnidraft.vocab.codec import Codec
from .drafters import Drafter, LookupFirstDrafter, ModelDrafter, PromptLookupDrafter
from omnidraft.llama.engine import Engine
from omnidraft.errors import BadRequest, VocabularyMismatch
from omnidraft.vocab.ngram_cache import NGramCache
from omnidraft.vocab.translator import DirectTranslator, IdentityTranslator, OmniTranslator, TextTranslator
from omnidraft.vocab.bridge import UNMAPPED, VocabBridge

METHODS = ("target", "prompt-lookup", "same-vocab", "tli", "slem", "omnidraft", "hybrid")
NEEDS_DRAFT_MODEL = ("same-vocab", "tli", "slem", "omnidraft", "hybrid")


class PairContext:
    """What model-based methods share for one (drafter, target) pair: codecs, bridge, n-gram cache."""

    def __init__(self, draft: Engine, target: Engine, bridge: VocabBridge, cache: NGramCache, window: int = 0):
        """``window``: the most prompt tokens a model drafter reads (``ModelDrafter``; 0: all of them)."""
        self.draft, self.target, self.bridge, self.cache, self.window = draft, target, bridge, cache, window
        self.draft_codec = Codec(draft)
        self.target_codec = Codec(target)


def _omnidraft(p: PairContext) -> Drafter:
    tr = OmniTranslator(p.bridge, p.cache, p.draft_codec, p.target_codec)
    return ModelDrafter("omnidraft", p.draft, tr, p.draft_codec, eog_ids=frozenset(p.bridge.eog_d2t),
                        window=p.window)


def _slem(p: PairContext) -> Drafter:
    tr = TextTranslator(p.bridge, p.draft_codec, p.target_codec)
    return ModelDrafter("slem", p.draft, tr, p.draft_codec, eog_ids=frozenset(p.bridge.eog_d2t), window=p.window)


def _tli(p: PairContext) -> Drafter:
    allowed = p.bridge.d2t != UNMAPPED
    for d in p.bridge.eog_d2t:
        allowed[d] = True
    return ModelDrafter("tli", p.draft, DirectTranslator(p.bridge), p.draft_codec, allowed=allowed,
                        eog_ids=frozenset(p.bridge.eog_d2t), window=p.window)


def _same_vocab(p: PairContext) -> Drafter:
    if not p.bridge.same_vocab:
        raise VocabularyMismatch("same-vocab needs a drafter with the target's exact vocabulary "
                                 "(e.g. qwen2.5-coder-0.5b drafting for qwen2.5-coder-1.5b)")
    eog = frozenset(int(t) for t in p.draft.eog_ids)
    return ModelDrafter("same-vocab", p.draft, IdentityTranslator(), p.draft_codec, eog_ids=eog, window=p.window)


def _hybrid(p: PairContext) -> Drafter:
    # the model drafter keeps the name "omnidraft" in its own stats; the hybrid reports as "hybrid"
    return LookupFirstDrafter("hybrid", _omnidraft(p))


_FACTORIES: dict[str, Callable[[PairContext], Drafter]] = {
    "omnidraft": _omnidraft, "slem": _slem, "tli": _tli, "same-vocab": _same_vocab, "hybrid": _hybrid,
}


def make_drafter(method: str, pair: PairContext | None) -> Drafter | None:
    if method not in METHODS:
        raise BadRequest(f"unknown method {method!r}; choose from {', '.join(METHODS)}")
    if method == "target":
        return None
    if method == "prompt-lookup":
        return PromptLookupDrafter()
    if pair is None:
        raise BadRequest(f"method {method!r} needs a draft model")
    return _FACTORIES[method](pair)

