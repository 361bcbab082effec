import sys, time
sys.path.insert(0, "/work/main/scripts/lab")
from decode_t1 import PROMPT, engines
(e,) = engines([sys.argv[1]], ("fast",)).values()
p = e.tokenize(PROMPT)
e.decode(p)
out = []
for n, reps in ((1, 1000), (4, 300)):
    t = time.perf_counter()
    for i in range(reps):
        e.decode(p[i % 7:i % 7 + n], "all")
        e.rollback(len(p))
    out.append(f"T({n}) {(time.perf_counter() - t) / reps * 1e3:.2f} ms")
print(" ".join(out))
