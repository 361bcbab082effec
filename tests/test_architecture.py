"""The package's layers, read from its imports (ast): a forbidden edge fails here, so the shape stays.

Layers (docs/ARCHITECTURE.md): core (engine, codec, bridge, translator, cache, verifier, drafters,
policy, generator, ...) <- contract (records, outbox, registry, rates) <- serving (server.*) and training
(trainer.*) <- apps (cli, adapt, bench, session as the generator factory).  Every import, at module level
or inside a function, counts.
"""

from __future__ import annotations

import ast
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1] / "backend" / "omnidraft"

CORE = {"vocab.chat", "vocab.codec", "llama.costmodel", "spec.drafters", "llama.engine", "errors", "spec.generator", "llama.invariance", "llama.log",
        "spec.methods", "vocab.ngram_cache", "spec.policy", "spec.predictor", "seq", "vocab.textstream", "vocab.translator", "spec.verifier",
        "vocab.bridge", "assets.models", "llama.build", "llama.buildprobe", "httpguard", "cliutil", "assets.corpora",
        "llama", "vocab", "spec", "assets"}
CONTRACT = {"online", "online.records", "online.outbox", "online.registry", "online.rates"}
TRAINER_PROCESS = {"trainer.service", "trainer.export", "trainer.loss", "trainer.model", "trainer.store",
                   "trainer.cli"}
APPS = {"apps.cli", "apps.adapt", "runtime.session", "apps.doctor"}


def _module_name(path: Path) -> str:
    rel = path.relative_to(ROOT).with_suffix("")
    parts = [p for p in rel.parts if p != "__init__"]
    return ".".join(parts) or "__init__"


def _imports(path: Path, name: str) -> set[str]:
    """omnidraft modules this file imports (relative or absolute), as names relative to the package."""
    tree = ast.parse(path.read_text())
    pkg = name.split(".")[:-1] if path.name != "__init__.py" else name.split(".")
    out: set[str] = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            out |= {a.name[len("omnidraft."):] for a in node.names if a.name.startswith("omnidraft.")}
        elif isinstance(node, ast.ImportFrom):
            if node.level:
                base = pkg[:len(pkg) - node.level + 1]
                mod = ".".join(base + ([node.module] if node.module else []))
            elif node.module and node.module.startswith("omnidraft"):
                mod = node.module[len("omnidraft."):] if node.module != "omnidraft" else ""
            else:
                continue
            out.add(mod)
            out |= {f"{mod}.{a.name}".lstrip(".") for a in node.names}
    return {m for m in out if m}


def graph() -> dict[str, set[str]]:
    files = {_module_name(p): p for p in ROOT.rglob("*.py")}
    return {n: {d for d in _imports(p, n) if d in files and d != n} for n, p in files.items()}


def _top(mod: str) -> str:
    return mod.split(".")[0]


def _violations(g, sources, forbidden) -> list[str]:
    return [f"{s} imports {d}" for s in sorted(sources) if s in g for d in sorted(g[s]) if forbidden(d)]


def test_core_imports_only_core():
    g = graph()
    bad = _violations(g, CORE, lambda d: d not in CORE)
    assert not bad, bad


def test_contract_imports_only_core_and_contract():
    g = graph()
    assert not _violations(g, CONTRACT, lambda d: d not in CORE | CONTRACT)


def test_serving_never_imports_training_or_apps_other_than_the_factory():
    g = graph()
    serving = {n for n in g if _top(n) == "server"}
    bad = _violations(g, serving, lambda d: _top(d) in ("trainer", "bench", "apps", "distill"))
    assert not bad, bad


def test_the_trainer_never_imports_serving_code():
    """The trainer meets serving only through the record schema and the drafter registry on disk."""
    g = graph()
    trainer = {n for n in g if _top(n) == "trainer"}
    assert not _violations(g, trainer, lambda d: _top(d) == "server")
    bad = _violations(g, TRAINER_PROCESS, lambda d: d in APPS or _top(d) in ("server", "bench"))
    assert not bad, bad


def test_adapt_meets_the_trainer_only_through_records_and_the_registry():
    """``omnidraft adapt`` runs the trainer as its own process (``omnidraft trainer serve|export``), as a
    server deployment does: it imports no trainer module, so no torch model or training state in-process."""
    g = graph()
    bad = _violations(g, {"apps.adapt"}, lambda d: _top(d) == "trainer")
    assert not bad, bad
    assert "online.registry" in g["apps.adapt"] and "online.outbox" in g["apps.adapt"]


def test_no_import_cycles():
    g = graph()
    state: dict[str, int] = {}
    cycles = []

    def visit(n, stack):
        state[n] = 1
        for d in g.get(n, ()):
            if state.get(d) == 1:
                cycles.append(stack[stack.index(d):] + [d])
            elif d not in state:
                visit(d, stack + [d])
        state[n] = 2

    for n in sorted(g):
        if n not in state:
            visit(n, [n])
    assert not cycles, cycles


def test_no_importlib_for_our_own_modules():
    offenders = [str(p.relative_to(ROOT)) for p in ROOT.rglob("*.py") if "importlib.import_module" in p.read_text()]
    assert not offenders, offenders


def test_the_rules_see_real_edges():
    """Guard against a parser that finds nothing (a test that cannot fail)."""
    g = graph()
    assert "llama.engine" in g["spec.generator"] and "spec.verifier" in g["spec.generator"]
    assert "spec.generator" in g["server.worker"]
    assert "online.registry" in g["trainer.service"]
