"""A drafter head over its most frequent tokens only (FR-Spec): gguf_tools.frhead + frhead.patch + ModelDrafter.

The head's rows are copied byte for byte, so each kept token's logit must equal the full model's exactly; the
patched llama.cpp pads the rest of the row with zeros; the drafter proposes only kept tokens; and output stays
the target's own (the lossless matrix runs with the served drafter, which has such a head)."""

from __future__ import annotations

import numpy as np
import pytest

from gguf_tools import frhead
from gguf_tools.errors import BadArgument
from omnidraft.assets import models
from omnidraft.errors import ModelNotFound
from omnidraft.llama import build
from omnidraft.llama.engine import Engine, EngineConfig
from tests.gguf_helpers import tiny_gguf

pytestmark = pytest.mark.skipif(not build.has_frhead(), reason="this llama.cpp build lacks frhead.patch")

CFG = EngineConfig(n_ctx=256, n_threads=2, batch_invariant=False)


@pytest.fixture(scope="module")
def tiny(tmp_path_factory):
    return tiny_gguf(tmp_path_factory, "llama", quant="q8_0")  # 32,000-token llama vocabulary, Q8_0 head


def _ids(n_vocab: int, k: int, seed: int = 0) -> np.ndarray:
    ranking = np.random.default_rng(seed).permutation(n_vocab)
    return frhead.choose(ranking, k, always=[1, 2])


def test_kept_logits_are_the_full_heads_bit_for_bit(tiny, tmp_path):
    with Engine(tiny, CFG) as full:
        ids = _ids(full.n_vocab, 5000)
        fr_path = frhead.write(tiny, tmp_path / "fr.gguf", ids)
        prompt = full.tokenize("def add(a, b):\n    return a + b\n")
        want = full.decode(prompt, "all").copy()
    assert frhead.head_token_ids(fr_path).tolist() == ids.tolist()
    with Engine(fr_path, CFG) as fr:
        assert fr.head_ids.tolist() == ids.tolist() and fr.n_vocab == want.shape[1]
        got = fr.decode(prompt, "all").copy()
    assert np.array_equal(got[:, :len(ids)], want[:, ids])  # the same bytes, the same kernel: identical
    assert not got[:, len(ids):].any()  # padding
    assert ids[:2].tolist() == [1, 2]  # the tokens asked for always come first


def test_bad_heads_are_refused(tiny, tmp_path):
    for bad in ([5, 5, 6], [10**7], []):
        with pytest.raises(BadArgument, match="distinct"):
            frhead.write(tiny, tmp_path / "x.gguf", bad)
    assert not list(tmp_path.iterdir())  # nothing half-written left behind


def test_a_mismatched_id_list_is_refused_at_load(tiny, tmp_path):
    """Rows and ids written apart (a hand-edited file): the engine refuses it rather than mislabel columns."""
    import gguf

    from gguf_tools.convert import field_kv
    from gguf_tools.inspect import read

    fr = frhead.write(tiny, tmp_path / "fr.gguf", list(range(100)))
    r = read(fr)
    w = gguf.GGUFWriter(str(tmp_path / "bad.gguf"), "llama")
    for key, f in r.fields.items():
        if key.startswith(("GGUF.", "general.architecture", "general.alignment")):
            continue
        kv = field_kv(key, f)
        w.add_key_value(*((key, kv[1][:50], kv[2], kv[3]) if key == frhead.IDS_KEY else kv))
    for t in r.tensors:
        w.add_tensor(t.name, np.asarray(t.data), raw_dtype=t.tensor_type)
    w.write_header_to_file(), w.write_kv_data_to_file(), w.write_tensors_to_file(), w.close()
    with pytest.raises(Exception, match="does not match"):
        Engine(tmp_path / "bad.gguf", CFG)


def test_a_non_llama_drafter_is_refused(tmp_path_factory, tmp_path):
    qwen = tiny_gguf(tmp_path_factory, "qwen2")
    with pytest.raises(BadArgument, match="llama architecture"):
        frhead.write(qwen, tmp_path / "x.gguf", [1, 2])


def test_a_published_version_is_served_with_the_same_head(tiny, tmp_path):
    """runtime.heads: a full-head file gets a copy with the serving head, made once; old copies are pruned;
    a file with its own head, or a session without one, is served as it is."""
    from omnidraft.runtime import heads

    ids = _ids(32000, 300)
    out = tmp_path / "drafters"
    a = heads.with_head(tiny, ids, out)
    assert a != tiny and frhead.head_token_ids(a).tolist() == ids.tolist()
    assert heads.with_head(tiny, ids, out) == a  # made once
    assert heads.with_head(tiny, None, out) == tiny and heads.with_head(a, ids, out) == a
    for i in range(heads.KEEP + 2):  # new versions: only the newest KEEP copies stay
        v = tmp_path / f"v{i}.gguf"
        v.write_bytes(tiny.read_bytes())
        last = heads.with_head(v, ids, out)
    assert len(list(out.glob("*.gguf"))) == heads.KEEP and last.exists()


def test_a_published_version_is_served_in_the_session_format(tiny, tmp_path):
    """runtime.heads.served_copy: a published Q8_0 file, served where the session runs ``NAME:q4_0_pure+fr``, is
    requantized (once) and given the head; a file already in the format is served as it is."""
    from gguf_tools.inspect import inspect
    from omnidraft.runtime import heads

    assert heads.served_quant(f"{models.SMOLLM2_D8}:q4_0_pure+fr") == "q4_0_pure"
    assert heads.served_quant(models.SMOLLM2_D8) == "" == heads.served_quant(f"{models.SMOLLM2_D8}:fr")
    ids, out = _ids(32000, 300), tmp_path / "drafters"
    a = heads.served_copy(tiny, "q4_0_pure", ids, out)
    info = inspect(a)
    assert info["file_type"] == "Q4_0" and set(info["tensor_types"]) == {"Q4_0", "F32"}
    assert frhead.head_token_ids(a).tolist() == ids.tolist()
    assert heads.served_copy(tiny, "q4_0_pure", ids, out) == a  # made once
    assert heads.served_copy(a, "q4_0_pure", ids, out) == a  # already served so
    assert heads.served_copy(tiny, "", None, out) == tiny
    with Engine(a, CFG) as e:  # and llama.cpp loads it
        assert e.head_ids.tolist() == ids.tolist()


def test_doctor_says_whether_the_build_has_the_head_patch(monkeypatch):
    from omnidraft.apps import doctor

    assert doctor._frhead_line().endswith("a third cheaper pass)")  # this module runs only where the patch is in
    monkeypatch.setattr(build, "has_frhead", lambda: False)
    assert doctor._frhead_line().startswith("no (frhead.patch not in this build)")


def test_a_build_without_the_patch_serves_the_full_head(monkeypatch):
    """Where llama.cpp lacks frhead.patch (ARM builds, the upstream fallback), ':fr' names fall back, loudly."""
    monkeypatch.setattr(build, "has_frhead", lambda: False)
    from omnidraft.runtime import heads

    quant = heads.served_quant(models.SERVED_DRAFT)
    want = models.resolve(f"{models.DEFAULT_DRAFT}:{quant}" if quant else models.DEFAULT_DRAFT)
    assert models.resolve(models.SERVED_DRAFT) == want


def test_format_names():
    assert models.split_format(models.SMOLLM2_D8, "fr") == ("", models.FR_DEFAULT_ROWS)
    assert models.split_format(models.SMOLLM2_D8, "fr8k") == ("", 8192)
    assert models.split_format(models.SMOLLM2_D8, "q4_0_pure+fr") == ("q4_0_pure", models.FR_DEFAULT_ROWS)
    assert models.split_format(models.QWEN_05B, "q4_0") == ("q4_0", 0)
    for bad in ("frx", "fr8", "q4_0+q8_0", "", "fr+"):
        with pytest.raises(ModelNotFound):
            models.split_format(models.SMOLLM2_D8, bad)
    with pytest.raises(ModelNotFound, match="no token ranking"):
        models.split_format(models.QWEN_05B, "fr")
    assert models.named_format(f"{models.SMOLLM2_D8}:q4_0_pure+fr") == (models.SMOLLM2_D8, "q4_0_pure+fr")
    assert models.named_format(models.SMOLLM2_D8) == ("", "") == models.named_format("/no/such:q4_0.gguf")


def test_the_served_drafter_proposes_only_head_tokens_and_output_is_the_targets(default_session, target_reference):
    """The session's drafter is the served one (``SERVED_DRAFT``, a 16k head): every drafted token lies in
    its head, and greedy output equals the target alone's (the lossless matrix checks many more prompts)."""
    from omnidraft.speculative.generator import GenerationParams

    s = default_session
    head = s.draft.head_ids
    if head is None:
        pytest.skip("the session runs a full-head drafter (OMNIDRAFT_TEST_DRAFT)")
    assert len(head) == models.FR_DEFAULT_ROWS
    gen = s.generator("omnidraft")
    gen.policy.cfg.name = "fixed"
    seen: list[int] = []
    translate = gen.drafter.translator.translate
    gen.drafter.translator.translate = lambda proposal: (seen.extend(proposal.ids), translate(proposal))[1]
    try:
        prompt = gen.prompt_from_text("def fibonacci(n):\n    ")
        params = GenerationParams(max_tokens=48)
        final = gen.generate(prompt, params)
    finally:
        gen.drafter.translator.translate = translate
    assert final.token_ids == target_reference(s.target, prompt, params)
    assert seen and set(seen) <= set(head.tolist())
