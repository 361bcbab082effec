"""How far apart start-up's T(n) / T(1) land when timed again: ``reps`` cost-model timings of ``rounds`` rounds each
(``costmodel.sample_passes``, as start-up times the target), one after the other, with two estimators of each ratio:
the ratio of the medians (what the cost model keeps) and the median of each round's ratio.

    python scripts/lab/ratio_noise.py 12 5 [TARGET] [OUT.json]
"""
import json
import statistics as st
import sys

from omnidraft.llama.costmodel import sample_passes
from omnidraft.runtime.session import Session, Settings

reps, rounds = int(sys.argv[1]), int(sys.argv[2])
s = Session(Settings(target=sys.argv[3] if len(sys.argv) > 3 else "qwen2.5-coder-1.5b", method="target"))
out = []
for r in range(reps):
    t = sample_passes(s.target, range(1, 9), rounds)
    rom = {n: st.median(t[n]) / st.median(t[1]) for n in t}
    mor = {n: st.median([a / b for a, b in zip(t[n], t[1])]) for n in t}
    out.append({"raw": t, "rom": rom, "mor": mor})
    print(r, "T1 %.1f ms" % (st.median(t[1]) * 1e3), "ratio of medians", " ".join("%.3f" % rom[n] for n in range(2, 7)),
          "| median of ratios", " ".join("%.3f" % mor[n] for n in range(2, 7)), flush=True)
for key in ("rom", "mor"):
    for n in (2, 3, 4, 5):
        v = [o[key][n] for o in out]
        print(key, n, "median %.3f  sd %.3f  range %.3f-%.3f" % (st.median(v), st.pstdev(v), min(v), max(v)))
if len(sys.argv) > 4:
    with open(sys.argv[4], "w") as f:
        json.dump(out, f)
