"""The package's layers, read from its folders and its imports (ast): a forbidden edge fails here, so the shape stays.

Each folder of ``backend/omnidraft`` is one package of one layer (docs/ARCHITECTURE.md draws the same words),
listed bottom-up; the package's own top-level modules (errors, seq, cliutil, httpguard) are the base.  A module
imports its own folder and the folders of lower layers, nothing else: packages of one layer are peers that never
import each other (serving and training meet only through ``online``; bench and distill both read the prompt sets
in ``assets``).  Every import, at module level or inside a
function, counts.
"""

from __future__ import annotations

import ast
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1] / "backend" / "omnidraft"
GGUF_TOOLS = Path(__file__).resolve().parents[1] / "gguf_tools"

LAYERS: list[tuple[str, ...]] = [
    ("",),                          # base: the package's own modules
    ("llama", "vocab"),             # core: llama.cpp, vocabularies
    ("speculative", "assets"),      # core: the speculative loop | pinned downloads, corpora and the prompt sets
    ("online",),                    # contract: records, outbox, registry, rates
    ("runtime",),                   # the generator factory (session)
    ("server", "trainer"),          # serving | training
    ("bench", "distill"),           # peers, never importing each other: both read the prompt sets in assets
    ("apps",),                      # the commands: cli, adapt, doctor
]
RANK = {folder: i for i, layer in enumerate(LAYERS) for folder in layer}



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


def _folder(mod: str) -> str:
    """The layer package holding a module ('' for the package's own top-level modules)."""
    top = mod.split(".")[0]
    return top if "." in mod or (ROOT / top).is_dir() else ""


def _violations(g, sources, forbidden) -> list[str]:
    return [f"{s} imports {d}" for s in sorted(sources) if s in g for d in sorted(g[s]) if forbidden(s, d)]


def _allowed(src: str, dst: str) -> bool:
    a, b = _folder(src), _folder(dst)
    return a == b or RANK[b] < RANK[a]


def test_every_folder_has_a_layer():
    folders = {p.parent.name for p in ROOT.glob("*/__init__.py")}
    assert folders == set(RANK) - {""}, sorted(folders ^ (set(RANK) - {""}))


def test_each_module_imports_only_its_folder_and_lower_layers():
    g = graph()
    bad = _violations(g, g, lambda s, d: not _allowed(s, d))
    assert not bad, bad


def test_distill_and_bench_are_peers_that_never_import_each_other():
    """Both read the prompt sets from ``assets``; measuring a distilled drafter through the benchmark runner is a
    command (``apps.evaluate``), above both."""
    assert RANK["bench"] == RANK["distill"]
    g = graph()
    bad = _violations(g, g, lambda s, d: {_folder(s), _folder(d)} == {"bench", "distill"})
    assert not bad, bad


def test_the_prompt_sets_are_assets():
    """The prompt sets (and their snapshots) live in ``assets``, so bench, distill and adapt read them there."""
    g = graph()
    for m in ("prompts", "lang_sets", "repo_sets", "chat_fresh", "stubs", "snapshot"):
        assert f"assets.{m}" in g and f"bench.{m}" not in g, m
    assert "assets.snapshot" in g["apps.adapt_items"] and "assets.prompts" in g["distill.sources"]
    assert "assets.prompts" in g["bench.runner"]


def test_prompt_set_imports_are_at_module_level():
    """Who reads a prompt set says so at the top of the module, not inside a function (issue 44)."""
    def inner(path):
        tree = ast.parse(path.read_text())
        funcs = [n for n in ast.walk(tree) if isinstance(n, (ast.FunctionDef, ast.AsyncFunctionDef))]
        for f in funcs:
            for node in ast.walk(f):
                if isinstance(node, ast.ImportFrom):
                    names = [node.module or ""] + [f"{node.module}.{a.name}" for a in node.names]
                    if any(n.startswith(f"omnidraft.assets.{m}") for n in names for m in _PROMPT_SETS) or \
                            (node.module == "omnidraft.assets" and {a.name for a in node.names} & set(_PROMPT_SETS)):
                        yield f"{path.relative_to(ROOT)}:{node.lineno}"
                elif isinstance(node, ast.Import):
                    if any(a.name.startswith(f"omnidraft.assets.{m}") for a in node.names for m in _PROMPT_SETS):
                        yield f"{path.relative_to(ROOT)}:{node.lineno}"
    readers = [p for p in ROOT.rglob("*.py") if p.parent.name in ("bench", "distill", "apps")]
    bad = [hit for p in readers for hit in inner(p)]
    assert not bad, bad


_PROMPT_SETS = ("prompts", "lang_sets", "repo_sets", "chat_fresh", "stubs", "snapshot")


def test_the_trainer_never_imports_serving_code():
    """The trainer meets serving only through the record schema and the drafter registry on disk."""
    g = graph()
    trainer = {n for n in g if _folder(n) == "trainer"}
    bad = _violations(g, trainer, lambda s, d: _folder(d) in ("server", "runtime", "speculative"))
    assert not bad, bad


def test_adapt_meets_the_trainer_only_through_records_and_the_registry():
    """``omnidraft adapt`` runs the trainer as its own process (``omnidraft trainer serve|export``), as a
    server deployment does: it imports no trainer module, so no torch model or training state in-process."""
    g = graph()
    bad = _violations(g, {"apps.adapt"}, lambda s, d: _folder(d) in ("trainer", "distill"))
    assert not bad, bad
    assert "online.registry" in g["apps.adapt"] and "online.outbox" in g["apps.adapt"]


def test_gguf_tools_stand_alone():
    """The GGUF tools import nothing of omnidraft (omnidraft may import them)."""
    offenders = []
    for p in GGUF_TOOLS.rglob("*.py"):
        for node in ast.walk(ast.parse(p.read_text())):
            names = [a.name for a in node.names] if isinstance(node, ast.Import) else \
                [node.module or ""] if isinstance(node, ast.ImportFrom) and not node.level else []
            offenders += [f"{p.name}: {n}" for n in names if n.split(".")[0] == "omnidraft"]
    assert not offenders, offenders


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
    assert "llama.engine" in g["speculative.generator"] and "speculative.verifier" in g["speculative.generator"]
    assert "speculative.generator" in g["server.worker"]
    assert "online.registry" in g["trainer.service"]


def _unexplained_imports(source: str) -> list[int]:
    """Lines of the imports inside a function of ``source`` that no ``# lazy:`` comment explains: on the import's
    own line, or on the nearest line above it that is neither blank nor another import (a comment, of one or more
    lines, heading a block of lazy imports, or the ``try:`` that guards them)."""
    tree = ast.parse(source)
    lines = source.splitlines()
    imports = [n for f in ast.walk(tree) if isinstance(f, (ast.FunctionDef, ast.AsyncFunctionDef))
               for n in ast.walk(f) if isinstance(n, (ast.Import, ast.ImportFrom))]
    import_lines = {i for n in ast.walk(tree) if isinstance(n, (ast.Import, ast.ImportFrom))
                    for i in range(n.lineno, n.end_lineno + 1)}
    bad = set()
    for node in imports:
        at = node.lineno - 1
        while at > 0 and (at in import_lines or not lines[at - 1].strip()):
            at -= 1
        above = [at] if at > 0 else []
        while above and above[-1] > 1 and lines[above[-1] - 1].lstrip().startswith("#") and \
                lines[above[-1] - 2].lstrip().startswith("#"):
            above.append(above[-1] - 1)  # up a comment of several lines
        if not any("# lazy:" in lines[i - 1] for i in (node.lineno, *above)):
            bad.add(node.lineno)
    return sorted(bad)


def test_imports_sit_at_module_level():
    """A module's imports are at its top, where a reader sees its place in the graph (issue 44).  An import stays
    inside a function only with a ``# lazy:`` comment saying why: a heavy package the module's commands need not
    load at start-up (torch, transformers, matplotlib), modules a measured start-up path skips (``omnidraft gguf``
    before ``apps.cli`` builds its parser), or one guarded by ``except ImportError``."""
    assert _unexplained_imports("def f():\n    import json\n") == [2]  # the rule sees an import
    assert _unexplained_imports("def f():\n    # lazy: torch,\n    # slow\n    import torch\n\n    import torch.nn\n") == []
    bad = [f"{p.relative_to(ROOT)}:{line}" for p in sorted(ROOT.rglob("*.py"))
           for line in _unexplained_imports(p.read_text())]
    assert not bad, bad


def test_modules_stay_small():
    """A module has one job: a few hundred lines (the product's and the GGUF tools')."""
    big = {str(p): n for p in [*ROOT.rglob("*.py"), *GGUF_TOOLS.rglob("*.py")]
           if (n := len(p.read_text().splitlines())) > 400}
    assert not big, big


def test_the_server_reads_no_ones_internals():
    """The server asks a session and its generators only what ``server.serving`` names (issue 44): no
    ``getattr``/``hasattr`` probing for attributes a real session has and a test's fake lacks, or the reverse."""
    probes = []
    for p in (ROOT / "server").glob("*.py"):
        for node in ast.walk(ast.parse(p.read_text())):
            if isinstance(node, ast.Call) and isinstance(node.func, ast.Name) and node.func.id in ("getattr", "hasattr"):
                probes.append(f"server/{p.name}:{node.lineno}: {ast.unparse(node)}")
    assert not probes, probes
    assert "server.serving" in graph()["server.worker"]  # the rule sees the protocol in use


def test_serving_imports_no_gguf_py():
    """A process that serves (the CLI, a session, the server) never loads gguf-py, sentencepiece, yaml or tqdm:
    7 MB of the small pair's peak memory (issue 41).  Headers are read by ``gguf_tools.header``; writing GGUFs
    and progress bars import them where they run."""
    import subprocess
    import sys

    code = ("import sys, omnidraft.apps.cli, omnidraft.runtime.session, omnidraft.server.app; "
            "print(sorted({m.split('.')[0] for m in sys.modules} & {'gguf', 'sentencepiece', 'yaml', 'tqdm'}))")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout
    assert out.strip() == "[]", out
