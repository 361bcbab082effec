"""What distillation reads: every language's held-out files and families stay out, and a small `distill data`
run aligns texts of every source."""

from pathlib import Path

import numpy as np
import pytest

from omnidraft.assets import corpora
from omnidraft.distill import sources as ds


def test_training_files_leave_out_every_heldout_file_and_family():
    files = corpora.source_files()
    if not files:
        pytest.skip("no toolchain sources on this machine")
    held = {f.name for f in files if corpora.file_split(f) != "train"}
    train = [f for fs in ds.training_files().values() for f in fs]
    assert train and held
    assert not held & {f.name for f in train}
    for lang, fam in corpora.HELDOUT_FAMILIES.items():
        assert all(not f.name.startswith(fam) for f in train if f.lang == lang)
    assert ds.ADAPTATION_DOMAIN not in ds.training_files()  # online adaptation's new domain: never distilled
    # the held-out family is really there (else the benchmark set would draw from nothing)
    assert any(corpora.file_split(f) == "heldout-family" for f in files)


def test_javascript_enters_only_when_asked_and_never_a_repository_sets_file():
    """``PrepConfig.javascript``: JavaScript's training files, without the held-out family, the seeded split or
    any file of the repositories ``assets.repo_sets`` draws from (npm-cli, undici), streamed halves included."""
    from omnidraft.assets import repo_sets

    held = ds.repo_set_files()
    if not held:
        pytest.skip(f"npm's sources absent ({repo_sets.NPM})")
    js = ds.training_files(javascript=True).get(ds.ADAPTATION_DOMAIN, [])
    names = {f.name for f in js}
    assert js and not held & names
    assert all(corpora.file_split(f) == "train" for f in js)
    undici = {str(p) for p in repo_sets.repo_files(repo_sets.REPOS["undici"])}
    root = repo_sets.REPOS["undici"].root
    streamed = {p for p in undici if repo_sets.file_split("undici", Path(p), root) == "train"}
    assert streamed and streamed <= held  # the streamed half stays out too, not only the held-out one
    assert ds.ADAPTATION_DOMAIN not in ds.training_files()


def test_man_pages_train_only_on_pages_no_benchmark_holds_out():
    """The ``man`` source reads streaming pages only, so no translation of a page behind a held-out prompt of
    ``nl`` or ``nl-de``/``nl-fr``/``nl-nl`` is read, in any language; and it yields text in several languages."""
    from itertools import islice

    from omnidraft.assets import lang_sets, prompts

    pages = ds.man_training_pages()
    if len(pages) < 2:
        pytest.skip("translated man pages absent")
    names = {p.name for ps in pages.values() for p in ps}
    for name in ("nl", *lang_sets.SETS):
        try:
            held = (lang_sets.load(name) if name in lang_sets.SETS else prompts.load(name)).split("heldout")
        except prompts.PromptSourceMissing:
            continue
        held_pages = {it.id.split(":")[1].split("/")[-1] for it in held}
        assert held_pages and not held_pages & names, name
    texts = list(islice(ds.man_cuts(seed=0), 40))
    assert len(texts) == 40 and all(len(t) >= 200 for t in texts)
    assert len({t for t in texts}) == 40


def test_python_training_files_leave_out_the_benchmarks_held_out_modules():
    """The stdlib sets' held-out items come from modules distillation never reads: the held-out fifth (its
    choice pinned: the same modules as always) and every module any stdlib set draws from."""
    from omnidraft.assets import prompts

    held = {"email", "unittest", "xml", "csv", "ast", "enum", "tarfile", "subprocess", "threading", "socket"}
    kept = {"json", "os", "re", "asyncio", "typing", "collections", "functools", "pathlib", "random", "inspect"}
    assert {m for m in held | kept if corpora.stdlib_heldout(m)} == held
    stdlib = corpora.stdlib_files()
    package_files = {}
    for mod, path in stdlib:
        package_files.setdefault(mod.split(".")[0], set()).add(path)
    train = set(ds.code_files(seed=0))
    assert train and not {p for m, p in stdlib if corpora.stdlib_heldout(m)} & train
    for name in ("stdlib-code", "docs"):
        items = prompts.load(name).split("heldout")
        tops = {i.id.split(":")[0].split(".")[0] for i in items}
        assert items and all(corpora.stdlib_heldout(top) for top in tops), name
        assert not set().union(*(package_files[top] for top in tops)) & train, name


def test_split_is_stable_and_about_a_tenth():
    files = [f for f in corpora.source_files() if f.family == f.lang]
    if len(files) < 500:
        pytest.skip("too few toolchain sources here")
    share = np.mean([corpora.file_split(f) == "heldout" for f in files])
    assert 0.06 < share < 0.14
    assert [corpora.file_split(f) for f in files[:50]] == [corpora.file_split(f) for f in files[:50]]


def test_windows_start_at_definitions_and_end_at_line_ends():
    import random

    src = "".join(f"static int f{i}(int x)\n{{\n    return x + {i};\n}}\n\n" for i in range(200))
    got = list(ds.windows(src, "c", random.Random(0), 40, chars=300))
    assert len(got) >= 35  # a window that starts near the end is too short and dropped
    assert all(w.endswith("\n") and len(w) >= 300 for w in got)
    # one line in five starts a function: a random start would hit one about 20 % of the time
    assert sum(w.startswith("static int f") for w in got) >= 0.6 * len(got)


def test_catalogs_are_other_languages():
    cats = list(zip(range(20), corpora.catalog_texts()))
    if not cats:
        pytest.skip("no translation catalogs on this machine")
    assert all(not lang.startswith("en") and text for _, (lang, text) in cats)


def test_chat_pairs_skip_heldout_conversations(monkeypatch):
    assert next(ds.chat_pairs(), None) is not None
    monkeypatch.setattr(ds, "sharegpt_heldout", lambda cid: True)
    assert next(ds.chat_pairs(), None) is None


def test_small_prepare_aligns_every_source(tmp_path):
    from omnidraft.distill.data import PrepConfig, prepare, read_meta

    cfg = PrepConfig(out=str(tmp_path / "t.npz"), code=12, code_other=12, nl=6, chat=6, gen_code=4,
                     gen_code_other=4, gen_nl=2, gen_chat=2, workers=2)
    meta = prepare(cfg, progress=False)
    z = np.load(cfg.out)
    assert read_meta(z)["examples"] == meta["examples"] == len(z["t_len"])
    assert z["t_len"].sum() == len(z["t_ids"]) and z["d_len"].sum() == len(z["d_ids"]) == len(z["slot"])
    for src in ("code", "code-other", "chat"):
        assert meta["per_source"][src] >= 5, meta["per_source"]
    assert meta["per_source"]["code-other-gen"] >= 3 and meta["per_source"]["chat-gen"] >= 1
    # every directly mapped slot points inside its example's target tokens
    off_d, off_t = np.cumsum([0, *z["d_len"]]), z["t_len"]
    for i in range(len(z["d_len"])):
        s = z["slot"][off_d[i]: off_d[i + 1]]
        assert s[0] == -2 and s.max() < off_t[i]
