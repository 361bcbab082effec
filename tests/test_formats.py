"""Which file a target runs from (runtime.formats): a mostly-Q5_0 registry target's exact ``:wide`` copy on x86 CPUs
without VNNI, the pinned file elsewhere, a path always as given."""

from __future__ import annotations

import collections

import pytest

from omnidraft.assets import models
from omnidraft.errors import BadRequest
from omnidraft.runtime import formats
from omnidraft.runtime.settings import Settings

ZEN3 = ("avx2",)  # what cpuid reports of an AVX2-only x86 (Zen 1-3, most laptops before VNNI)
ZEN4 = ("avx2", "avx512f", "avx512_vnni")
ALDER_LAKE = ("avx2", "avx_vnni")
PHONE = ("asimddp", "i8mm")


@pytest.fixture
def resolved(monkeypatch):
    """models.resolve recorded instead of run: which name the session would load."""
    monkeypatch.setattr(models, "resolve", lambda name, fetch=True: f"resolved:{name}")


def test_only_avx2_without_vnni_takes_the_wide_copy():
    assert formats.wide_pays(ZEN3)
    assert not any(formats.wide_pays(f) for f in (ZEN4, ALDER_LAKE, PHONE, ()))


def test_auto_widens_the_mostly_q5_0_target_where_it_pays(resolved):
    name = models.QWEN_05B
    assert formats.target_file(name, "auto", ZEN3) == f"resolved:{name}:wide"
    assert formats.target_file(name.upper(), "auto", ZEN3) == f"resolved:{name}:wide"
    for flags in (ZEN4, ALDER_LAKE, PHONE):
        assert formats.target_file(name, "auto", flags) == f"resolved:{name}"
    assert formats.target_file(models.QWEN_15B, "auto", ZEN3) == f"resolved:{models.QWEN_15B}"  # K-quants only
    assert formats.target_file(name, "off", ZEN3) == f"resolved:{name}"
    assert formats.target_file(name, "on", ZEN4) == f"resolved:{name}:wide"
    assert formats.target_file(f"{name}:q4_0_pure", "auto", ZEN3) == f"resolved:{name}:q4_0_pure"  # named: as named


def test_the_speed_format_is_offered_with_its_perplexity_never_taken_unasked(resolved, caplog):
    """Issue 41: "where you offer a requantized speed format, say so and show its perplexity beside the original".
    A registry target run from its pinned weights logs the offer; the file stays the pinned one."""
    line = formats.speed_offer(models.QWEN_15B)
    assert f"'{models.QWEN_15B}:q4_0_pure'" in line and "3.821 against 3.623" in line and "+5.5 %" in line
    assert "+7.1 %" in formats.speed_offer(models.QWEN_05B)
    for other in (f"{models.QWEN_15B}:q4_0_pure", models.GEMMA3, models.SMOLLM2_D8, "/tmp/mine.gguf"):
        assert formats.speed_offer(other) == ""
    with caplog.at_level("INFO", logger=formats.__name__):
        assert formats.target_file(models.QWEN_15B, "auto", ZEN4) == f"resolved:{models.QWEN_15B}"
        assert formats.target_file(f"{models.QWEN_15B}:q4_0_pure", "auto", ZEN4) == \
            f"resolved:{models.QWEN_15B}:q4_0_pure"
    assert [r.getMessage() for r in caplog.records] == [line]  # once, for the pinned name only


def test_a_path_is_always_that_file(resolved, tmp_path):
    own = tmp_path / "mine.gguf"
    own.write_bytes(b"x")
    assert formats.target_file(str(own), "auto", ZEN3) == f"resolved:{own}"
    with pytest.raises(BadRequest, match="omnidraft-gguf widen"):
        formats.target_file(str(own), "on", ZEN3)


def test_a_bad_choice_is_refused_before_anything_loads():
    with pytest.raises(BadRequest, match="auto, on, off"):
        Settings(wide="yes").check()
    with pytest.raises(BadRequest, match="auto, on, off"):
        formats.target_file(models.QWEN_05B, "maybe", ZEN3)


def test_the_widened_targets_are_mostly_q5_0():
    """The rule's premise, read from the pinned files where they are downloaded."""
    from gguf_tools.inspect import read
    for name in formats.MOSTLY_Q5_0:
        spec = models.get_spec(name)
        if not models.is_verified(spec):
            pytest.skip(f"{name} is not downloaded here")
        by_type = collections.Counter()
        for t in read(models.model_path(spec)).tensors:
            by_type[t.tensor_type.name] += int(t.n_bytes)
        assert by_type["Q5_0"] / sum(by_type.values()) > 0.5, by_type
