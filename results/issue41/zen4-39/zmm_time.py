import sys, tempfile
from pathlib import Path
sys.path.insert(0, "/work/main"); sys.path.insert(0, "/work/main/scripts/lab")
import q50_rows as Q
with tempfile.TemporaryDirectory() as tmp:
    d = {"ymm": Q.build(Path("/work/main/backend/omnidraft/llama/patch/sbk.cpp"), "avx512-vnni", Path(tmp)),
         "zmm": Q.build(Path("/tmp/exp_zmm/sbk.cpp"), "avx512-vnni", Path(tmp))}
    for shape, (rows, nb, reps) in Q.SHAPES.items():
        print(shape, {n: Q.timed(d, "q5_0", rows, nb, reps, n) for n in (1, 2, 4, 8)}, flush=True)
