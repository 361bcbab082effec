"""Translation between real vocabularies never changes the text (property tests).

Vocab-only GGUFs from the llama-cpp-python sdist: llama-spm (SentencePiece with byte
fallback and a space prefix), gpt-2 (byte-level BPE), qwen2 (byte-level BPE, 152k).
"""

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from omnidraft.vocab.codec import Codec, utf8_complete_prefix
from omnidraft.vocab.ngram_cache import NGramCache
from omnidraft.vocab.translator import DirectTranslator, OmniTranslator, Proposal, TextTranslator
from omnidraft.vocab.bridge import UNMAPPED, build_bridge

PAIRS = [("gpt-2", "qwen2"), ("llama-spm", "qwen2"), ("qwen2", "llama-spm")]
TEXT = st.text(alphabet=st.characters(blacklist_categories=("Cs",)), max_size=60)
HSET = settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])


@pytest.fixture(scope="module", params=PAIRS, ids=lambda p: f"{p[0]}->{p[1]}")
def pair(request, vocab_engine):
    d, t = vocab_engine(request.param[0]), vocab_engine(request.param[1])
    bridge = build_bridge(d, t)
    dc, tc = Codec(d), Codec(t)
    cache = NGramCache(bridge.draft_fp, bridge.target_fp)
    return bridge, dc, tc, OmniTranslator(bridge, cache, dc, tc)


@pytest.fixture(scope="module")
def codec(vocab_engine):
    """One codec per vocabulary for the property tests' examples: building one indexes the whole vocabulary
    (57 ms for Qwen's), 360 times over these examples; what they test is encode and decode."""
    made: dict[str, Codec] = {}

    def get(name: str) -> Codec:
        if name not in made:
            made[name] = Codec(vocab_engine(name))
        return made[name]

    return get


@pytest.mark.parametrize("name", ["llama-spm", "gpt-2", "qwen2", "llama-bpe"])
@given(text=TEXT)
@HSET
def test_codec_round_trips_any_unicode(codec, name, text):
    c = codec(name)
    data = text.encode()
    assert c.decode(c.encode(data)) == data


@given(text=TEXT, cut=st.integers(min_value=0, max_value=240))
@HSET
def test_codec_round_trips_bytes_cut_inside_characters(codec, text, cut):
    for name in ("llama-spm", "qwen2"):
        c = codec(name)
        data = text.encode()[: cut]  # may end inside a character
        assert c.decode(c.encode(data)) == data
        assert data[: utf8_complete_prefix(data)].decode("utf-8") is not None


@pytest.mark.parametrize("name", ["llama-spm", "qwen2"])
def test_codec_remembers_short_texts_with_the_same_ids(vocab_engine, name, monkeypatch):
    """The loop encodes the same short pieces every step: the tokenizer sees each once, the ids are those of a
    fresh codec, a caller changing its list changes nothing remembered, and the memory stays bounded."""
    from omnidraft.vocab import codec as codec_mod

    eng = vocab_engine(name)
    c, fresh = Codec(eng), Codec(eng)
    calls = []
    real = eng.tokenize
    monkeypatch.setattr(eng, "tokenize", lambda data, *a, **k: (calls.append(data), real(data, *a, **k))[1])
    pieces = [b"    return x", b" (", b"\n\n", b"def f", "h\u00e9llo w".encode(), b"x = y " * 8]
    first = [c.encode(p) for p in pieces]
    n = len(calls)
    again = [c.encode(p) for p in pieces]
    assert again == first and n > 0 and calls[n:]  # the 48-byte text (over SHORT) is tokenized again...
    assert all(d in pieces[-1] for d in calls[n:])  # ...and nothing else
    monkeypatch.setattr(eng, "tokenize", real)
    assert first == [fresh.encode(p) for p in pieces]
    first[0].append(0)
    assert c.encode(pieces[0]) == fresh.encode(pieces[0])
    monkeypatch.setattr(codec_mod, "SHORT_ENTRIES", 3)
    for i in range(10):
        c.encode(b"w%d" % i)
    assert len(c._short) <= 3


@given(text=TEXT)
@HSET
def test_omnidraft_and_slem_translation_preserve_text(pair, text):
    bridge, dc, tc, omni = pair
    data = text.encode()
    draft_ids = dc.encode(data)
    prop = Proposal(draft_ids, [0.5] * len(draft_ids))
    # teach the cache the target's spelling of this very text, then translate again
    omni.learn(prop, tc.encode(data))
    for tr in (omni, TextTranslator(bridge, dc, tc)):
        cands = tr.translate(prop)
        assert tc.decode(cands.ids) == data
        assert not any(tc.engine.is_special[t] for t in cands.ids)


@given(text=TEXT)
@HSET
def test_tli_translation_is_a_prefix_of_the_text(pair, text):
    bridge, dc, tc, _ = pair
    draft_ids = dc.encode(text.encode())
    cands = DirectTranslator(bridge).translate(Proposal(draft_ids, [1.0] * len(draft_ids)))
    assert text.encode().startswith(tc.decode(cands.ids))


def test_ngram_cache_merges_multi_token_words(pair):
    bridge, dc, tc, omni = pair
    word = " internationalization".encode()
    t_ids, d_ids = tc.encode(word), dc.encode(word)
    omni.learn(Proposal(d_ids, [1.0] * len(d_ids)), t_ids)
    cands = omni.translate(Proposal(d_ids, [1.0] * len(d_ids)))
    assert cands.ids == t_ids or tc.decode(cands.ids) == word
    if len(t_ids) < len(d_ids):
        assert "ngram" in cands.kinds


def test_bridge_maps_identical_bytes_only(pair):
    bridge, dc, tc, _ = pair
    mapped = (bridge.d2t != UNMAPPED).nonzero()[0]
    assert len(mapped) > 1000
    for d in mapped[:: max(1, len(mapped) // 500)]:
        assert dc.token_bytes[d] == tc.token_bytes[bridge.d2t[d]]


def test_codec_spells_cut_characters_from_a_small_table_as_the_whole_one_does(vocab_engine):
    """Bytes cut inside a character (CJK, emoji, accents) are spelled from the tokens that are not valid UTF-8
    themselves, with the ids a longest match over the whole vocabulary gives.  Byte-level BPE never needs the
    whole table (13 MB for the served pair); SentencePiece builds it for its first word."""
    from omnidraft.vocab.codec import _utf8_segments

    eng = vocab_engine("qwen2")
    c, whole = Codec(eng), Codec(eng)
    data = "def \u51fd\u6570(): return '\U0001f642' # na\u00efve, \u00e9t\u00e9".encode()
    for a in range(len(data)):
        for b in range(a + 1, len(data) + 1):
            piece = data[a:b]
            assert c.decode(c.encode(piece)) == piece
            for valid, seg in _utf8_segments(piece):
                if not valid:
                    assert c.encode(seg) == whole._greedy(seg), seg
    assert c._whole is None and whole._whole is not None
    spm = Codec(vocab_engine("llama-spm"))
    assert spm.decode(spm.encode(b"word")) == b"word" and spm._whole is not None
