"""Free drafts first (issue 14): the lookup-first hybrid skips the model where the context already holds
the continuation, asks the model elsewhere, and its output is still the target alone's."""

from omnidraft.speculative.drafters import LookupFirstDrafter, PromptLookupDrafter
from omnidraft.speculative.generator import GenerationParams
from omnidraft.speculative.step import Verdict
from tests.reference import reference_target_tokens

# a prompt whose answer repeats its own text: lookup has something to propose, and the model the rest
PROMPT = ("def area(w, h):\n    return w * h\n\n\ndef perimeter(w, h):\n    return 2 * (w + h)\n\n\n"
          "# the same two functions again, with docstrings\ndef area(w, h):\n")


def test_hybrid_uses_free_drafts_and_the_model_and_stays_exact(default_session):
    gen = default_session.generator("hybrid")
    gen.policy.cfg.name = "fixed"
    hybrid = gen.drafter
    assert isinstance(hybrid, LookupFirstDrafter)
    prompt = gen.prompt_from_text(PROMPT)
    params = GenerationParams(max_tokens=40)
    model_before = hybrid.model.stats()["drafts"]
    final = gen.generate(prompt, params)
    assert final.token_ids == reference_target_tokens(default_session.target, prompt, params)
    lookup, model = hybrid.stats()["lookup"], hybrid.model.stats()
    free_steps = lookup["drafts"] - (model["drafts"] - model_before)  # lookup asked every step; hits skip the model
    assert free_steps > 0, "the repeated text gave lookup nothing to propose"
    assert model["drafts"] > model_before, "the model never drafted"
    assert final.stats.accepted > 0


class _Model:
    """Counts the model drafter's calls; proposes nothing."""

    name = "fake"
    window = 0

    def __init__(self):
        self.calls, self.accepted = 0, []

    def begin(self, prompt, read=True):
        pass

    def draft(self, k, stop):
        from omnidraft.speculative.step import Draft
        self.calls += 1
        return Draft()

    def accept(self, verdict):
        self.accepted.extend(verdict.tokens)

    def stats(self):
        return {"name": self.name, "drafts": self.calls}


def test_lookup_hit_skips_the_model_and_both_see_every_token():
    from omnidraft.speculative.drafters import PromptInput

    model = _Model()
    h = LookupFirstDrafter("hybrid", model, min_ngram=2)
    h.begin(PromptInput([1, 2, 3, 4, 1, 2], b""))
    d = h.draft(3, None)
    assert d.candidates.ids == [3, 4, 1] and model.calls == 0  # "1 2" seen before: free draft
    h.accept(Verdict.chain(d.candidates.ids, 3, 9))
    h.draft(3, None)  # "1 9" never seen: the model is asked
    assert model.calls == 1 and model.accepted == [3, 4, 1, 9]
    assert isinstance(h.lookup, PromptLookupDrafter)
