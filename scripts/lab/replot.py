"""Draw a results JSON's plots again, with the code that drew them (results/README.md: plots are kept only where
a document cites them; the others are made again from their JSON on demand).

    .venv/bin/python scripts/lab/replot.py results/20261126-072324.json [--out DIR]

Three kinds, told apart by their keys: `omnidraft bench run` (one speedup and one time plot per run, named as
the run named them), `omnidraft bench passes` (passes-TAG.png) and `omnidraft adapt` (NAME.png beside NAME.json).
"""

import argparse
import json
from pathlib import Path
from types import SimpleNamespace


def replot(src: Path, out: Path) -> list[Path]:
    data = json.loads(src.read_text())
    out.mkdir(parents=True, exist_ok=True)
    if "curve" in data:  # omnidraft adapt
        from omnidraft.apps import adapt_report

        curve = data["curve"]
        path = adapt_report.plot(curve, data.get("control"), out / (src.stem + ".png"),
                                 SimpleNamespace(**data["settings"]), data.get("old"), curve[0]["set"] if curve else "")
        return [path] if path else []
    if "runs" in data and data["runs"] and "results" in data["runs"][0]:  # omnidraft bench run
        from omnidraft.bench import report

        paths = []
        for run in data["runs"]:
            name = f"{src.stem}-{Path(run['target']).name.replace(':', '-')}-{run['set']['name']}-{run['mode']}"
            paths += report.plots(run["results"], out / name)
        return paths
    if "runs" in data:  # omnidraft bench passes
        from omnidraft.bench import passes

        path = out / (src.stem + ".png")
        passes.plot(data, path)
        return [path]
    raise SystemExit(f"{src}: not a bench run, bench passes or adapt result")


if __name__ == "__main__":
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("json", type=Path)
    ap.add_argument("--out", type=Path, help="directory (default: beside the JSON)")
    a = ap.parse_args()
    for p in replot(a.json, a.out or a.json.parent):
        print(p)
