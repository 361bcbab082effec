"""The n-gram cache: budget, eviction, persistence, recovery."""

import pytest

from omnidraft.vocab.ngram_cache import NGramCache, entry_bytes


@pytest.mark.parametrize("policy", ["lru", "lfu"])
def test_stays_within_budget_under_eviction(policy):
    c = NGramCache("d", "t", budget_bytes=2000, policy=policy)
    for i in range(1000):
        c.add([i, i + 1, i + 2], 10_000 + i)
        assert c.nbytes <= 2000
    assert c.evicted > 0 and len(c) > 0
    assert c.nbytes == sum(entry_bytes(len(k)) for k in c._map)  # exact accounting
    assert c.stats()["bytes_per_entry"] == entry_bytes(3)


def test_lru_keeps_recently_used_and_lfu_keeps_frequent():
    lru = NGramCache("d", "t", budget_bytes=entry_bytes(2) * 3, policy="lru")
    for k in ([1, 2], [3, 4], [5, 6]):
        lru.add(k, 9)
    lru.longest_match([1, 2], 0)  # touch the oldest
    lru.add([7, 8], 9)
    assert lru.get([1, 2]) == 9 and lru.get([3, 4]) is None

    lfu = NGramCache("d", "t", budget_bytes=entry_bytes(2) * 3, policy="lfu")
    for k in ([1, 2], [3, 4], [5, 6]):
        lfu.add(k, 9)
    for _ in range(3):
        lfu.longest_match([3, 4], 0)
    lfu.add([7, 8], 9)
    assert lfu.get([3, 4]) == 9


def test_longest_match_prefers_longer_runs():
    c = NGramCache("d", "t")
    c.add([1, 2], 100)
    c.add([1, 2, 3], 200)
    assert c.longest_match([1, 2, 3, 4], 0) == (200, 3)
    assert c.longest_match([0, 1, 2], 1) == (100, 2)
    assert c.longest_match([5, 6], 0) is None
    assert not c.add([7], 1)  # single tokens belong to the direct map


def test_save_load_round_trip(tmp_path):
    c = NGramCache("d", "t", policy="lfu")
    for i in range(50):
        c.add([i, i + 1], i)
    c.longest_match([3, 4], 0)
    path = tmp_path / "c.odng"
    c.save(path)
    assert path.stat().st_size > c.nbytes  # records + header + checksum
    d = NGramCache.load(path, "d", "t", policy="lfu")
    assert d._map == c._map and d.nbytes == c.nbytes and list(d._map) == list(c._map)


def test_corrupt_truncated_or_foreign_file_gives_fresh_cache(tmp_path, caplog):
    c = NGramCache("d", "t")
    c.add([1, 2], 3)
    path = tmp_path / "c.odng"
    for damage in ("flip", "truncate", "foreign", "garbage"):
        c.save(path)
        data = bytearray(path.read_bytes())
        if damage == "flip":
            data[20] ^= 0xFF
            path.write_bytes(bytes(data))
            fp = ("d", "t")
        elif damage == "truncate":
            path.write_bytes(bytes(data[: len(data) // 2]))
            fp = ("d", "t")
        elif damage == "foreign":
            fp = ("other", "t")
        else:
            path.write_bytes(b"not a cache at all")
            fp = ("d", "t")
        with caplog.at_level("WARNING"):
            fresh = NGramCache.open(path, *fp)
        assert len(fresh) == 0
        assert "starting fresh" in caplog.text
        assert not path.exists() and path.with_name(path.name + ".bad").exists()
