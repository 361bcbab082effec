"""Q5_0 and Q8_0 blocks through sbk.cpp's small-batch kernel, one thread, K = 896 (see README.md here)."""
import sys, time, tempfile
from pathlib import Path
import numpy as np
sys.path.insert(0, str(Path(__file__).resolve().parents[4]))  # the repository root
from tests import sbk_harness as H

def best_us(fn, reps, batches=30):
    best = 1e9
    for _ in range(batches):
        t = time.perf_counter()
        for _ in range(reps): fn()
        best = min(best, (time.perf_counter() - t) / reps)
    return best * 1e6

K = 896; nb = K // 32
rng = np.random.default_rng(1)
tmp = Path(tempfile.mkdtemp())
libs = H.build_many([("avx512-vnni", ()), ("avx512-vnni", ("SBK_Q50_ZMM=1",))], tmp)
act = H.q8_0_rows(rng, 8, nb)
for rows, reps, label in ((256, 200, "L2 256 rows"), (2432, 20, "L3 2432 rows"), (75968, 2, "memory 75968 rows")):
    w5 = H.q5_0_blocks(rng, rows, nb); w8 = H.q8_0_blocks(rng, rows, nb)
    out = np.zeros((8, rows), np.float32)
    for (tier, d), dll in libs.items():
        line = []
        for name, t, w in (("q5_0", H.Q5_0, w5), ("q8_0", H.Q8_0, w8)):
            ts = [best_us(lambda: dll.sbk_gemm(t, K, w.ctypes.data, w.shape[1], 0, rows, act.ctypes.data, act.shape[1], n, out.ctypes.data, rows), reps) for n in (1, 2, 4, 8)]
            line.append(f"{name} " + " ".join(f"{x:8.1f}" for x in ts))
        print(f"{label:18s} {str(d):22s} " + " | ".join(line), flush=True)
# equality check: zmm q5_0 vs ymm q5_0
w5 = H.q5_0_blocks(rng, 300, nb)
a = [H.gemm(dll, H.Q5_0, K, w5, act, 8) for dll in libs.values()]
print("max diff ymm vs zmm q5_0:", float(np.max(np.abs(a[0] - a[1]))), "rel", float(np.max(np.abs(a[0]-a[1])/ (np.abs(a[0])+1e-6))))
