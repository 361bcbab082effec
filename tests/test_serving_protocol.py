"""The server's view of a session (``server.serving``): the real Session and the tests' model-free ones all
implement it, so the server needs no fallbacks for what a fake lacks."""

from __future__ import annotations

import inspect
import typing

import pytest

from hardening_helpers import FakeGen, FakeSession
from omnidraft.runtime.session import Session
from omnidraft.server.serving import ServingGenerator, ServingSession
from omnidraft.speculative.generator import Generator


def _members(proto) -> set[str]:
    """What a protocol names: its methods, properties and annotated attributes."""
    own = {n for n, v in vars(proto).items() if not n.startswith("_") and (callable(v) or isinstance(v, property))}
    return own | set(typing.get_type_hints(proto))


def _fakes():
    from test_hardening_api import CliSession, TickingGen, TickingSession
    from test_hardening_probe3 import _CachingGen
    from test_server_app import _Gen, _Session

    return [FakeSession(), TickingSession(), CliSession(), _Session()], [FakeGen(b"", 0.0), TickingGen(0.0),
                                                                         _CachingGen(), _Gen()]


def test_the_protocols_name_what_the_server_uses():
    assert _members(ServingSession) == {"settings", "drafter_version", "n_ctx", "warm_up", "generator",
                                        "maybe_swap", "ngram_stats", "training_record", "save_state"}
    assert _members(ServingGenerator) == {"live_stats", "prompt_from_text", "prompt_from_messages", "stream"}


def test_the_fakes_implement_the_protocols():
    sessions, gens = _fakes()
    for s in sessions:
        assert isinstance(s, ServingSession), type(s).__name__
        assert isinstance(s.generator(), ServingGenerator), type(s).__name__
        for name in ("warm_up", "generator", "training_record"):  # the same parameters as the protocol's
            assert list(inspect.signature(getattr(s, name)).parameters) == \
                list(inspect.signature(getattr(ServingSession, name)).parameters)[1:], (type(s).__name__, name)
    for g in gens:
        assert isinstance(g, ServingGenerator), type(g).__name__


@pytest.mark.parametrize("proto,cls", [(ServingSession, Session), (ServingGenerator, Generator)])
def test_the_real_classes_implement_the_protocols(proto, cls):
    """Checked on the classes (no model loads): each member is a method, property or attribute there."""
    missing = []
    for name in _members(proto):
        if name in vars(proto) and callable(vars(proto)[name]):
            ok = callable(getattr(cls, name, None))
            if ok:
                want = list(inspect.signature(vars(proto)[name]).parameters)
                ok = list(inspect.signature(getattr(cls, name)).parameters) == want
        else:  # a property on the class, or an attribute its __init__ sets
            ok = isinstance(getattr(cls, name, None), property) or f"self.{name}" in inspect.getsource(cls.__init__)
        if not ok:
            missing.append(name)
    assert not missing, missing
