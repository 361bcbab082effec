"""Hot swap: a drafter published while generations run is picked up between requests, none fails."""

import threading

from gguf_tools.inspect import inspect
from omnidraft.assets import models
from omnidraft.runtime import heads
from omnidraft.speculative.generator import GenerationParams
from tests.reference import reference_target_tokens
from omnidraft.online.registry import DrafterRegistry


def test_publish_during_a_generation_loop_fails_no_request(default_session, tmp_path):
    session = default_session
    reg = DrafterRegistry(tmp_path / "registry", keep=3)
    session.registry = reg
    head = session.draft.head_ids
    try:
        published = threading.Event()

        def publisher():
            # a new drafter version appears while requests are being served
            reg.publish(models.resolve("smollm2-135m"), {"note": "test copy"})
            published.set()

        prompts = ["def add(a, b):\n", "def square(x):\n", "class Node:\n", "def mean(xs):\n"]
        versions, outputs = [], []
        t = None
        for i, p in enumerate(prompts):
            session.maybe_swap()
            gen = session.generator("omnidraft")
            gen.policy.cfg.name = "fixed"
            pin = gen.prompt_from_text(p)
            if i == 1:
                t = threading.Thread(target=publisher)
                t.start()
            final = gen.generate(pin, GenerationParams(max_tokens=12))
            versions.append(session.drafter_version)
            outputs.append(final.token_ids == reference_target_tokens(session.target, pin,
                                                                       GenerationParams(max_tokens=12)))
            if t is not None:
                t.join()
                assert published.is_set()
        session.maybe_swap()
        assert all(outputs)  # every request completed, and still equals the target alone
        assert session.drafter_version == reg.current()[0] != "base"
        assert versions[0] == "base"
        # the served drafter's frequency-ranked head is kept across the swap (runtime.heads)
        if head is not None:
            assert session.draft.head_ids.tolist() == head.tolist()
        # and so is its quantization: the published Q4_1 file serves requantized, as the shipped one does
        if quant := heads.served_quant(session.settings.draft):
            assert inspect(session.draft.path)["file_type"] == quant.removesuffix("_pure").upper()
        # a broken publish never takes the working drafter down
        bad = tmp_path / "broken.gguf"
        bad.write_bytes(b"GGUF\x03\x00\x00\x00" + b"\x00" * 100)
        reg.publish(bad, {"note": "broken"})
        before = session.drafter_version
        assert not session.maybe_swap()
        assert session.drafter_version == before
        # nor does a version whose file changed after publishing (a flipped weight byte loads, and drafts worse)
        changed = reg.publish(models.resolve("smollm2-135m"), {"note": "changed after publishing"})
        with open(reg.versions / changed / "model.gguf", "r+b") as f:
            f.seek(-1024, 2)
            byte = f.read(1)[0]
            f.seek(-1024, 2)
            f.write(bytes([byte ^ 0x10]))
        assert not session.maybe_swap()
        assert session.drafter_version == before
        gen = session.generator("omnidraft")
        assert gen.generate(gen.prompt_from_text("x = 1\n"), GenerationParams(max_tokens=4)).token_ids
    finally:
        session.registry = None


def test_a_version_of_another_registry_is_swapped_in_though_its_name_is_the_one_served(tmp_path):
    """Version names restart in every registry: serving v0001 of one, the v0001 of another is a new drafter."""
    from omnidraft.runtime.pair import Swaps
    from omnidraft.server.cli import WatchedRegistry

    class Fixed:  # a registry whose current version is always v0001, at its own root
        def __init__(self, root):
            self.root = root

        def current(self):
            return "v0001", self.root / "v0001.gguf"

    loaded: list[str] = []
    swaps = Swaps(loaded.append, Fixed(tmp_path / "a"))
    assert swaps.maybe_swap() and swaps.version == "v0001"
    assert not swaps.maybe_swap()  # the same registry's same version: nothing to do
    swaps.registry = WatchedRegistry(Fixed(tmp_path / "b"))  # as the server installs one
    assert swaps.maybe_swap() and swaps.version == "v0001"
    assert loaded == [str(tmp_path / "a" / "v0001.gguf"), str(tmp_path / "b" / "v0001.gguf")]
