"""The prompt sets drawn from sources never used in training (stubs, code-other, nl, chat-fresh), and the
Markdown summary of distill_eval.  Sets read from this machine skip only when its sources are absent."""

import ast
import gzip
import json
from collections import Counter

import pytest

from omnidraft.assets import corpora, models
from omnidraft.assets import lang_sets, prompts, snapshot
from omnidraft.assets.chat_fresh import MESSAGES
from omnidraft.assets.stubs import STUBS
from omnidraft.apps.evaluate import summary_markdown, tau_at, write_summary

HELDOUT_AT_LEAST = {"stubs": 16, "code-other": 15, "nl": 16, "chat-fresh": 16, **dict.fromkeys(lang_sets.SETS, 32)}


def _load(name: str, seed: int = 0) -> prompts.PromptSet:
    try:
        return lang_sets.load(name, seed) if name in lang_sets.SETS else prompts.load(name, seed)
    except prompts.PromptSourceMissing as e:
        pytest.skip(f"local sources absent: {e}")


@pytest.mark.parametrize("name", sorted(HELDOUT_AT_LEAST))
def test_set_loads_deterministically_with_its_held_out_count(name):
    a, b = _load(name), _load(name)
    assert [(i.id, i.prompt, i.split) for i in a.items] == [(i.id, i.prompt, i.split) for i in b.items]
    assert len(a.split("heldout")) >= HELDOUT_AT_LEAST[name] and a.split("stream")
    assert len({i.id for i in a.items}) == len(a.items)
    assert all(isinstance(i.prompt, str) and i.prompt.strip() for i in a.items)
    assert all(i.chat == (name == "chat-fresh") for i in a.items)


def _with_body(stub: str) -> str:
    """The stub plus `pass` at the depth its last line asks for, so that it parses."""
    last = stub.rstrip("\n").splitlines()[-1]
    depth = len(last) - len(last.lstrip()) + (4 if last.rstrip().endswith(":") else 0)
    return stub + " " * depth + "pass\n"


def test_stubs_are_valid_python_with_a_docstring_and_half_held_out():
    for stub in STUBS:
        ast.parse(_with_body(stub))
        assert '"""' in stub and stub.endswith("\n")
    assert len(STUBS) >= 32 and len(_load("stubs").split("heldout")) == len(STUBS) // 2


def test_stubs_are_not_humaneval():
    path = models.cache_dir() / "datasets" / "HumanEval.jsonl.gz"
    if not path.exists():
        pytest.skip(f"HumanEval not cached at {path}")
    he = [json.loads(line)["prompt"] for line in gzip.open(path, "rt", encoding="utf-8")]
    signatures = [line.strip() for s in STUBS for line in s.splitlines()
                  if line.lstrip().startswith(("def ", "async def ", "class "))]
    assert len(signatures) >= len(STUBS)
    assert not [sig for sig in signatures if any(sig in p for p in he)]


def test_chat_fresh_holds_out_each_other_language():
    held = _load("chat-fresh").split("heldout")
    langs = Counter(i.id.rsplit(":", 1)[1] for i in held)
    assert {"es", "fr", "de", "zh"} <= set(langs) and sum(n for lang, n in langs.items() if lang != "en") >= 4
    assert len({lang for lang, _ in MESSAGES}) == 5


def test_code_other_held_out_comes_only_from_never_trained_families():
    ps = _load("code-other")
    files = {(f.lang, f.name): f for f in corpora.source_files()}
    for item in ps.items:
        lang, rest = item.id.split(":", 1)
        name, line = rest.rsplit(":", 1)
        f = files[(lang, name)]
        assert corpora.file_split(f) == ("heldout-family" if item.split == "heldout" else "heldout")
        lines = f.read().splitlines(keepends=True)[int(line) - 1:]
        assert "".join(lines).startswith(item.prompt) and 600 <= len(item.prompt) <= 900
        assert len(lines) - len(item.prompt.splitlines()) >= 40  # something left for the target to continue
    per_lang = Counter(i.id.split(":", 1)[0] for i in ps.split("heldout"))
    assert set(per_lang) == {"c", "cpp", "java", "javascript", "perl"} and min(per_lang.values()) >= 3
    assert [i.id.split(":", 1)[0] for i in ps.split("heldout")[:5]] == sorted(per_lang)  # first n span languages


def test_nl_items_are_openings_of_translated_man_pages():
    ps = _load("nl")
    pages = {f"{lang}:{p.parent.name}/{p.name}": p for lang, p in corpora.man_pages()}
    for item in ps.items:
        assert item.id in pages and corpora.man_page_text(pages[item.id]).startswith(item.prompt)
    held = ps.split("heldout")
    assert max(Counter(i.id.split(":")[0] for i in held).values()) <= 2
    assert len(ps.split("stream")) >= 16
    page_names = {s: {i.id.rsplit("/", 1)[1] for i in ps.split(s)} for s in ("heldout", "stream")}
    assert not page_names["heldout"] & page_names["stream"]  # no translation of a held-out page streams


def _page_names(ps: prompts.PromptSet, split: str) -> set[str]:
    return {i.id.split(":")[1].rsplit("/", 1)[1] for i in ps.split(split)}


@pytest.mark.parametrize("name", lang_sets.SETS)
def test_single_language_set_is_windows_of_its_own_pages_split_by_page(name):
    ps, lang = _load(name), name[3:]
    assert (len(ps.split("stream")), len(ps.split("heldout"))) == (64, 32)  # adapt's defaults, none cycled
    pages = {f"{lang}:{p.parent.name}/{p.name}": p for _, p in corpora.man_pages((lang,))}
    seen: dict[str, list[tuple[int, int]]] = {}
    for item in ps.items:
        page, line = item.id.rsplit(":", 1)
        assert page in pages and not item.chat  # its own language's pages only
        lines = lang_sets._decode_glyphs(corpora.man_page_text(pages[page])).splitlines(keepends=True)
        assert "".join(lines[int(line) - 1:]).startswith(item.prompt) and 500 <= len(item.prompt) <= 800
        assert prompts._usable_translation(item.prompt)
        seen.setdefault(page, []).append((int(line), int(line) + item.prompt.count("\n")))
    for spans in seen.values():  # a page's windows do not overlap
        spans.sort()
        assert len(spans) <= 4 and all(a[1] < b[0] for a, b in zip(spans, spans[1:]))
    assert len({i.id.rsplit(":", 1)[0] for i in ps.split("heldout")}) == 32  # the first n held out span n pages
    assert not _page_names(ps, "heldout") & _page_names(ps, "stream")  # no held-out page streams


def test_single_language_sets_keep_languages_and_held_out_pages_apart():
    sets = [_load(name) for name in lang_sets.SETS]
    for a in sets:
        assert {i.id.split(":")[0] for i in a.items} == {a.name[3:]}
        for b in sets:  # split by page name: a page held out in one language streams in none
            assert not _page_names(a, "heldout") & _page_names(b, "stream")


def test_glyph_escapes_decode_and_unknown_ones_stay():
    text = "Gr\\(:o\\(ss\\(en \\[:u] \\(zz\n'br\\}\nVerbindung"
    assert lang_sets._decode_glyphs(text) == "Größ– ü \\(zz\nVerbindung"
    assert not prompts._usable_translation(lang_sets._decode_glyphs(text))  # the unknown escape keeps it out


@pytest.mark.parametrize("name", ["stubs", lang_sets.SETS[0]])
def test_distill_evaluate_measures_language_sets_as_well_as_the_built_in_ones(name):
    from omnidraft.apps.evaluate import items_for

    want = _load(name).split("heldout")[:3]
    assert len(want) == 3
    assert [(i.id, i.prompt) for i in items_for(name, 3)] == [(i.id, i.prompt) for i in want]


def test_sets_refuse_to_load_without_their_sources(monkeypatch):
    monkeypatch.setattr(corpora, "man_pages", lambda *languages: [])
    monkeypatch.setattr(corpora, "source_files", lambda: [])
    for name in ("nl", "code-other", *lang_sets.SETS):
        with pytest.raises(prompts.PromptSourceMissing, match=name):
            snapshot.load_set(name)
    assert issubclass(prompts.PromptSourceMissing, ValueError)


def _set_result(taus: dict) -> dict:
    """A run_sets result for one set: tau and acceptance per fixed-k label."""
    return {"tau": taus, "acceptance": {lab: {j: (t - 1) / int(j) for j, t in by_k.items()}
                                        for lab, by_k in taus.items()}}


def test_summary_table_gives_tau_and_acceptance_at_4(tmp_path):
    k4 = {1: 1.8, 2: 2.4, 3: 2.8, 4: 3.0}
    k6 = {1: 1.8, 2: 2.4, 3: 2.8, 4: 3.2, 5: 3.3, 6: 3.4}
    res = {"target": "qwen2.5-coder-0.5b", "n": 4, "max_tokens": 48, "drafts": {
        "a.gguf": {"sets": {"stubs": _set_result({"omnidraft k=6": k6, "omnidraft k=4": k4}),
                            "nl": _set_result({"omnidraft k=3": {1: 1.5, 2: 1.8, 3: 2.0}})}},
        "b.gguf": {"sets": {"stubs": json.loads(json.dumps(_set_result({"omnidraft k=6": k6})))}}}}
    assert tau_at(res["drafts"]["a.gguf"]["sets"]["stubs"], 4) == (3.0, 0.5)  # the exact k = 4 run first
    md = write_summary(res, tmp_path / "eval.json")
    assert md == tmp_path / "eval.md" and md.read_text() == summary_markdown(res)
    lines = md.read_text().splitlines()
    assert "qwen2.5-coder-0.5b" in lines[0] and "n = 4" in lines[0] and "max_tokens = 48" in lines[0]
    assert lines[2] == "| drafter | stubs | nl |" and lines[3] == "|---|---|---|"
    assert lines[4] == "| `a.gguf` | 3.00 (0.50) | - |"
    assert lines[5] == "| `b.gguf` | 3.20 (0.55) | - |"  # read back from JSON: string keys


def test_a_long_language_set_keeps_the_held_out_pages_and_streams_every_window_of_the_others():
    base, long = _load(lang_sets.SETS[0]), snapshot.load_set(lang_sets.LONG_SETS[0])
    assert [(i.id, i.prompt) for i in long.split("heldout")] == [(i.id, i.prompt) for i in base.split("heldout")]
    stream = {i.id: i.prompt for i in long.split("stream")}
    assert len(stream) > 64 and {i.id for i in base.split("stream")} <= set(stream)  # more than the short set's
    assert not _page_names(long, "heldout") & _page_names(long, "stream")


def test_the_long_stdlib_stream_does_not_repeat_holds_out_stdlib_code_and_never_streams_humaneval():
    base, long = prompts.load("stdlib-code"), snapshot.load_set("stdlib-code-long")
    again = prompts.load("stdlib-code-long")
    assert [(i.id, i.prompt, i.split) for i in long.items] == [(i.id, i.prompt, i.split) for i in again.items]
    stream = long.split("stream")
    assert len(stream) == prompts.LONG_CODE and len({i.prompt for i in stream}) == len(stream)  # 1,000 distinct
    assert [i.id for i in stream[:len(base.split("stream"))]] == [i.id for i in base.split("stream")]
    assert [(i.id, i.prompt) for i in long.split("heldout")] == [(i.id, i.prompt) for i in base.split("heldout")]
    top = {split: {i.id.split(":")[0].split(".")[0] for i in long.split(split)} for split in ("stream", "heldout")}
    assert not top["stream"] & top["heldout"] and not any(corpora.stdlib_heldout(m) for m in top["stream"])
    assert all(not i.chat and i.prompt.lstrip().startswith(("def ", "async def ", "@")) for i in stream)
    path = models.cache_dir() / "datasets" / "HumanEval.jsonl.gz"
    if not path.exists():
        pytest.skip(f"HumanEval not cached at {path}")
    he = [json.loads(line)["prompt"] for line in gzip.open(path, "rt", encoding="utf-8")]
    heads = {line.strip() for p in he for line in p.splitlines() if line.lstrip().startswith("def ")}
    assert len(heads) >= 164 and not [i.id for i in stream if heads & {x.strip() for x in i.prompt.splitlines()}]
