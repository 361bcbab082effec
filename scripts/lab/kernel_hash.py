"""A kernel change's exactness, build against build: the sha256 of a file's logits for passes of n = 1..8 tokens
through the product's fast-mode Engine (2 threads), each at the end of the same prompt and rolled back.  Run once
per build (``PYTHONPATH=<a build's directory holding llama_cpp>`` for the other): equal hashes mean the change
gives every row the same bits as before; within one run, row i of every pass equal to one-token decoding is
checked too.

    .venv/bin/python scripts/lab/kernel_hash.py qwen2.5-coder-1.5b:q8_0
"""

import hashlib
import sys

import numpy as np

from decode_t1 import PROMPT, engines


def main(name: str) -> int:
    (e,) = engines([name], ("fast",)).values()
    prompt = e.tokenize(PROMPT)
    e.decode(prompt[:-8])
    base = len(prompt) - 8
    single = []
    for i in range(8):  # one token at a time: the decode path
        single.append(np.array(e.decode(prompt[base + i: base + i + 1], "all")[-1]))
    e.rollback(base)
    for n in range(1, 9):
        rows = np.array(e.decode(prompt[base: base + n], "all"))
        e.rollback(base)
        same = all(np.array_equal(rows[i], single[i]) for i in range(n))
        print(f"n={n} sha256 {hashlib.sha256(rows.astype(np.float32).tobytes()).hexdigest()[:16]} "
              f"rows as decoded one by one: {'yes' if same else 'NO'}", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1]))
