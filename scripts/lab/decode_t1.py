"""One-token decode times measured interleaved, the figures BENCHMARKS.md "A cheaper drafter pass, and defaults
that pay" quotes (a noisy 2-core VM: only passes alternated in one process compare fairly).

    .venv/bin/python scripts/lab/decode_t1.py drafters FILE...   # fast-mode engines, passes alternated (200 rounds)
    .venv/bin/python scripts/lab/decode_t1.py modes FILE         # one file, exact and fast engines alternated
    .venv/bin/python scripts/lab/decode_t1.py passes FILE        # the same, T(n) for n = 1, 2, 4, 8 (2 threads)
    .venv/bin/python scripts/lab/decode_t1.py llama FILE         # llama-cpp-python's own Llama.eval (run it with
                                                                 # PYTHONPATH=<upstream build> for the peer)
    .venv/bin/python scripts/lab/decode_t1.py coverage           # held-out prompt tokens inside 4k..32k heads

FILE: a .gguf path or a model name (``smollm2-135m-d8-qwen:fr``).  Each pass decodes one token at position ~60
and is rolled back, so every sample sees the same context.
"""

import argparse
import statistics
import time

import numpy as np

PROMPT = "def fibonacci(n):\n    \"\"\"Return the n-th Fibonacci number.\"\"\"\n" * 3


def _alternate(engines: dict, rounds: int) -> dict:
    prompt = next(iter(engines.values())).tokenize(PROMPT)
    for e in engines.values():
        e.decode(prompt)
    times = {k: [] for k in engines}
    for r in range(rounds):
        for k, e in engines.items():
            t = time.perf_counter()
            e.decode(prompt[r % 7: r % 7 + 1])
            times[k].append(time.perf_counter() - t)
            e.rollback(len(prompt))
    return {k: statistics.median(v) * 1e3 for k, v in times.items()}


def engines(names: list[str], modes: tuple[str, ...], n_ctx: int = 1024) -> dict:
    from omnidraft.assets import models
    from omnidraft.llama.engine import Engine, EngineConfig

    return {f"{n} {m}": Engine(models.resolve(n),
                               EngineConfig(n_threads=2, n_ctx=n_ctx, batch_invariant=(m == "exact")))
            for n in names for m in modes}


def llama_t1(name: str, rounds: int = 40) -> float:
    import llama_cpp

    from omnidraft.assets import models

    llm = llama_cpp.Llama(str(models.resolve(name)), n_threads=2, n_threads_batch=2, n_ctx=4096, verbose=False)
    prompt = llm.tokenize(PROMPT.encode())
    llm.eval(prompt)
    ts = []
    for r in range(rounds):
        t = time.perf_counter()
        llm.eval(prompt[r % 7: r % 7 + 1])
        ts.append(time.perf_counter() - t)
    return statistics.median(ts[5:]) * 1e3


def coverage() -> None:
    from omnidraft.assets import models, prompts
    from omnidraft.llama.engine import Engine, EngineConfig

    ranking = np.load(models.head_rank_path(models.DEFAULT_DRAFT))
    pos = np.empty(len(ranking), dtype=np.int64)
    pos[ranking] = np.arange(len(ranking))
    with Engine(models.resolve(models.DEFAULT_DRAFT), EngineConfig(vocab_only=True)) as e:
        for name in ("humaneval", "javascript", "chat-fresh"):
            ids = np.concatenate([np.asarray(e.tokenize(it.prompt)) for it in prompts.load(name).items])
            print(name, len(ids), {k: round(float((pos[ids] < k).mean()), 4) for k in (4096, 8192, 16384, 32768)})


def passes(name: str, rounds: int = 12) -> None:
    """T(1) and T(n)/T(1) for n = 2, 4, 8 of one file's exact and fast engines, passes alternated."""
    engs = engines([name], ("exact", "fast"))  # 2 threads
    prompt = next(iter(engs.values())).tokenize(PROMPT)
    for e in engs.values():
        e.decode(prompt)
    times = {(k, n): [] for k in engs for n in (1, 2, 4, 8)}
    for r in range(rounds):
        for n in (1, 2, 4, 8):
            for k, e in engs.items():
                t = time.perf_counter()
                e.decode(prompt[r % 7: r % 7 + n], "all")
                times[(k, n)].append(time.perf_counter() - t)
                e.rollback(len(prompt))
    for k in engs:
        t1 = statistics.median(times[(k, 1)]) * 1e3
        rel = ", ".join(f"T({n}) {statistics.median(times[(k, n)]) * 1e3 / t1:.2f}x" for n in (2, 4, 8))
        print(f"{k:45s} T(1) {t1:.1f} ms, {rel}")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("what", choices=("drafters", "modes", "passes", "llama", "coverage"))
    ap.add_argument("files", nargs="*")
    a = ap.parse_args()
    if a.what == "coverage":
        coverage()
    elif a.what == "passes":
        passes(a.files[0])
    elif a.what == "llama":
        print(f"Llama.eval T(1) median {llama_t1(a.files[0]):.2f} ms")
    else:
        engs = engines(a.files, ("fast",) if a.what == "drafters" else ("exact", "fast"))
        for k, ms in _alternate(engs, 200 if a.what == "drafters" else 60).items():
            print(f"{k:55s} T(1) median {ms:.2f} ms")


if __name__ == "__main__":
    main()
