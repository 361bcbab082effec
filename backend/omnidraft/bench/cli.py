"""``omnidraft bench``: side-by-side speed of every method, the cost model, and the ceiling.

    omnidraft bench run --preset small        # the BENCHMARKS.md slice (< 15 min on 2 cores)
    omnidraft bench run --preset full         # both Qwen targets, all sets, k = 1..6, sampled too
    omnidraft bench costmodel                 # T_verify(n), T_draft; quantization and thread sweep
    omnidraft bench kernels                   # fidelity and pass times of the exact and fast kernel modes
    omnidraft bench passes                    # T(n) per kernel build (small-batch kernel, ggml's, upstream)
"""

from __future__ import annotations

import argparse
import logging
import sys
from dataclasses import asdict, dataclass, field
from pathlib import Path

from gguf_tools.quantize import quantize
from omnidraft.assets import models, prompts, snapshot
from omnidraft.cliutil import add_dataclass_args, dataclass_from_args
from omnidraft.errors import from_gguf_tools
from omnidraft.llama import invariance, log as llama_log
from omnidraft.llama.costmodel import CostModel, time_passes
from omnidraft.llama.engine import AUTO, Engine, EngineConfig, KERNEL_CHOICES, KernelMode
from omnidraft.runtime.formats import WIDE_CHOICES
from omnidraft.runtime.session import Session, Settings
from omnidraft.speculative.generator import GenerationParams
from omnidraft.speculative.stats import GenerationStats

from . import device, passes, peer, projection, report, runner
from .runner import Config

log = logging.getLogger(__name__)

METHODS_DEFAULT = "target,prompt-lookup,tli,slem,omnidraft,hybrid"  # hybrid: the product's default method
PRESETS = {
    # small: the slice that reproduces BENCHMARKS.md in about 20 minutes on a 2-core machine
    "small": dict(targets=f"{models.QWEN_05B},{models.QWEN_15B}", sets="humaneval,stdlib-code", n=3,
                  max_tokens=48, ks="1,2,4,6", methods=METHODS_DEFAULT + ",same-vocab", adaptive=True,
                  sampled=False, same_vocab=models.QWEN_05B),
    "full": dict(targets=f"{models.QWEN_05B},{models.QWEN_15B}", sets="humaneval,stdlib-code,docs", n=20,
                 max_tokens=128, ks="1,2,3,4,5,6", methods=METHODS_DEFAULT + ",same-vocab", adaptive=True,
                 sampled=True, same_vocab=models.QWEN_05B),
}
_PRESET = {"default_text": "from the preset"}  # a bench run flag that, given, overrides the preset's value
_THREADS = "CPU threads (0 = all cores)"
_OUT = "directory for the JSON and markdown"


@dataclass
class RunSettings:
    """``bench run``: a preset, any of its settings given here instead, and how to run."""

    preset: str = field(default="small", metadata={
        "help": "small: the BENCHMARKS.md slice; full: everything (hours on 2 cores)", "choices": sorted(PRESETS)})
    targets: str | None = field(default=None, metadata={"help": "comma-separated target models", **_PRESET})
    draft: str = field(default=models.SERVED_DRAFT, metadata={"help": "drafter model"})
    sets: str | None = field(default=None, metadata={
        "help": "comma-separated prompt sets: humaneval, stdlib-code, docs", **_PRESET})
    n: int | None = field(default=None, metadata={"help": "prompts per set (held-out split)", **_PRESET})
    max_tokens: int | None = field(default=None, metadata={"help": "tokens generated per prompt", **_PRESET})
    ks: str | None = field(default=None, metadata={"help": "comma-separated fixed draft lengths", **_PRESET})
    methods: str | None = field(default=None, metadata={"help": "comma-separated methods", **_PRESET})
    threads: int = field(default=0, metadata={"help": _THREADS})
    draft_threads: int = field(default=0, metadata={"help": "drafter CPU threads (0 = auto, as generate does)"})
    gpu_layers: int = field(default=0, metadata={
        "help": "layers of the target and the drafter (and the peer's model) offloaded to a GPU build (-1 = all)"})
    kernels: str = field(default=AUTO, metadata={
        "help": "target kernel mode (auto: the fastest one allowed to verify; see README)", "choices": KERNEL_CHOICES})
    wide: str = field(default="auto", metadata={
        "help": "auto|on|off: a registry target from its exact ':wide' copy, as generate and serve (off: the "
                "pinned file, e.g. for a --peer run on another build)", "choices": WIDE_CHOICES})
    verify_batch: int = field(default=0, metadata={
        "help": "largest verification batch, instead of the kernel plan's (0: the plan's). Past the rows measured "
                "bit-identical, output may differ from the target alone at near-ties: the same-output column says"})
    adaptive_k: int = field(default=0, metadata={
        "help": "draft-length cap of the adaptive policies (0: the largest of --ks; the default generation's is 4)"})
    gamma: bool = field(default=True, metadata={
        "help": "beside the cost policy, the paper's gamma policy (with an adaptive preset)"})
    plots: bool = field(default=True, metadata={"help": "PNG plots beside the JSON and markdown"})
    temperature: float | None = field(default=None, metadata={
        "help": "sample at this temperature (with --top-p, --top-k and --seed) instead of the preset's modes (greedy, "
                "and 0.7 / top-p 0.95 with the full preset); output stays the target alone's for the seed",
        "default_text": "the preset's"})
    top_p: float = field(default=1.0, metadata={"help": "nucleus of the sampled mode (with --temperature)"})
    top_k: int = field(default=0, metadata={"help": "top-k of the sampled mode (with --temperature; 0 = off)"})
    seed: int = field(default=1234, metadata={"help": "seed of the sampled mode (with --temperature)"})
    peer: bool = field(default=False, metadata={
        "help": "also run plain llama-cpp-python (Llama.create_completion, its default settings) on the same GGUF: "
                "the peer a user would pick"})
    out: str = field(default="results", metadata={"help": "directory for JSON, markdown and PNG outputs"})
    progress: bool = field(default=True, metadata={"help": "a progress bar"})


@dataclass
class KernelsSettings:
    """``bench kernels``: the fidelity and pass times of each kernel mode."""

    targets: str = field(default=f"{models.QWEN_05B},{models.QWEN_05B}:q4_0", metadata={
        "help": "comma-separated targets (NAME:q4_0 = requantized copy, made on first use)"})
    threads: int = field(default=0, metadata={"help": _THREADS})
    prefixes: str = field(default="37,64,100,150,200,250,300,400,500,700", metadata={
        "help": "prefix lengths after which 8 positions are compared (about 35 rows each)"})
    out: str = field(default="results", metadata={"help": _OUT})


@dataclass
class CostmodelSettings:
    """``bench costmodel``: pass times per quantization and thread count."""

    target: str = field(default=models.QWEN_05B, metadata={"help": "target model"})
    draft: str = field(default=models.SERVED_DRAFT, metadata={"help": "drafter model"})
    quants: str = field(default="q4_k_m,q4_0,q8_0", metadata={"help": "target quantizations to sweep"})
    threads_list: str = field(default="1,2", metadata={"help": "thread counts to sweep"})
    max_n: int = field(default=8, metadata={"help": "largest verification batch to time"})
    out: str = field(default="results", metadata={"help": _OUT})


@dataclass
class PeerSettings:
    """``bench peer``: tokens per target pass beside transformers' universal assisted generation."""

    target: str = field(default=models.QWEN_05B, metadata={"help": "target model"})
    draft: str = field(default=models.SMOLLM2, metadata={"help": "drafter model"})
    set: str = field(default="humaneval", metadata={"help": "prompt set (held-out split)"})
    n: int = field(default=4, metadata={"help": "prompts"})
    max_tokens: int = field(default=32, metadata={"help": "tokens per prompt"})
    k: int = field(default=6, metadata={"help": "draft length for both sides", "short": "-k"})
    threads: int = field(default=0, metadata={"help": "CPU threads for llama.cpp (0 = all cores)"})
    out: str = field(default="results", metadata={"help": _OUT})


def register(sub) -> None:
    p = sub.add_parser("bench", help="benchmarks: every method side by side, the cost model, the ceiling",
                       description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    bs = p.add_subparsers(dest="bench_cmd", required=True, metavar="WHAT")

    r = bs.add_parser("run", help="run methods side by side on prompt sets and write results/ + plots",
                      description="Interleaves configurations per prompt (A B A B) in one process; speedups are "
                                  "against the target alone measured in the same run.")
    _settings_args(r, RunSettings, _cmd_run)

    kk = bs.add_parser("kernels", help="fidelity and pass times of each target kernel mode (exact, fast)",
                       description="For each target file and kernel mode: how far batched logits (2..8 rows) stray "
                                   "from one-token decoding over many positions (largest bit-identical batch, max "
                                   "|difference|, argmax flips), T(n)/T(1), and the verification plan it allows.")
    _settings_args(kk, KernelsSettings, _cmd_kernels)

    pp = bs.add_parser("passes", help="T(n) of a target pass per kernel build, beside this CPU's roofline",
                       description=passes.__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    passes.add_arguments(pp)
    pp.set_defaults(func=passes.cmd_passes)

    c = bs.add_parser("costmodel", help="measure T_verify(n), T_draft; sweep quantization and threads",
                      description="Times target passes of n = 1..8 tokens and one drafter token, for each "
                                  "quantization (re-quantized from the shipped file with `omnidraft gguf "
                                  "quantize`) and thread count, and prints the speedup ceiling at 100 % acceptance.")
    _settings_args(c, CostmodelSettings, _cmd_costmodel)

    y = bs.add_parser("synthetic", help="cost model from random-weight models of the real shapes (any machine)",
                      description="Writes skeletons of the cached real models (metadata + tensor shapes, no "
                                  "weights), builds random-weight GGUFs of the same shapes and quantization with "
                                  "`omnidraft gguf synth` + quantize, and times T_verify(n) and T_draft. "
                                  "scripts/device/device_costmodel.sh runs the same on another machine.")
    device.add_arguments(y)
    y.add_argument("--out", default="results", help="directory for the JSON")
    y.set_defaults(func=device.cmd_synthetic)

    j = bs.add_parser("project", help="predicted speedup of each method on other machines' cost models",
                      description="Combines the acceptance measured here (a `bench run` JSON) with cost models "
                                  "measured elsewhere (`bench synthetic` / device JSONs), and checks on this "
                                  "machine that predicted and measured speedups agree within 10 %%.")
    projection.add_arguments(j)
    j.set_defaults(func=projection.cmd_project)

    q = bs.add_parser("peer", help="compare tokens per target pass with transformers' universal assisted generation",
                      description="Runs Hugging Face transformers' assisted generation (assistant_model + "
                                  "assistant_tokenizer) on the same GGUF models (dequantized) and prompts as ours "
                                  "(slem, omnidraft) at the same draft length. Compares tau, not wall time.")
    _settings_args(q, PeerSettings, _cmd_peer)


def _settings_args(parser: argparse.ArgumentParser, settings: type, cmd) -> None:
    """The flags of a settings dataclass; ``cmd`` gets the settings built from them."""
    add_dataclass_args(parser, settings)
    parser.set_defaults(func=lambda args: cmd(dataclass_from_args(settings, args)))


def _csv(s: str) -> list[str]:
    return [x.strip() for x in s.split(",") if x.strip()]


def _cmd_run(cfg: RunSettings) -> int:
    preset = dict(PRESETS[cfg.preset])
    preset.update({k: getattr(cfg, k) for k in preset if getattr(cfg, k, None) is not None})  # flags given win
    draft = cfg.draft
    methods = _csv(preset["methods"])
    ks = [int(k) for k in _csv(preset["ks"])]
    tag = runner.now_tag()
    out_dir = Path(cfg.out)
    data = {"command": "omnidraft bench run " + " ".join(_argv_of()), "preset": cfg.preset,
            "settings": preset, "draft": draft, "machine": report.machine(gpu=cfg.gpu_layers != 0), "runs": []}
    md = [f"# Benchmark {tag}", "", f"Command: `{data['command']}`", "", f"Machine: {data['machine']}", ""]
    for target in _csv(preset["targets"]):
        session = Session(Settings(target=target, draft=draft, threads=cfg.threads, n_ctx=4096,
                                   draft_n_ctx=4096, method="omnidraft", kernels=cfg.kernels,
                                   gpu_layers=cfg.gpu_layers, draft_threads=cfg.draft_threads, wide=cfg.wide))
        if cfg.verify_batch:  # past the plan: speed measured, exactness reported, not promised
            session.max_verify_batch = cfg.verify_batch
        same = preset.get("same_vocab") if "same-vocab" in methods and target != preset.get("same_vocab") else None
        ctx = runner.BenchContext(session, same)
        md += [f"## Target {target}, drafter {draft}", ""]
        configs = _configs(methods, ks, preset["adaptive"], same is not None, cfg.gamma, cfg.adaptive_k)
        if cfg.peer:
            configs.insert(1, runner.Config(runner.PEER))
        modes = [("greedy", GenerationParams(max_tokens=preset["max_tokens"]))]
        if cfg.temperature is not None:
            modes = [(f"sampled-t{cfg.temperature:g}", GenerationParams(
                max_tokens=preset["max_tokens"], temperature=cfg.temperature, top_p=cfg.top_p, top_k=cfg.top_k,
                seed=cfg.seed))]
        elif preset["sampled"]:
            modes.append(("sampled", GenerationParams(max_tokens=preset["max_tokens"], temperature=0.7,
                                                      top_p=0.95, seed=1234)))
        for set_name in _csv(preset["sets"]):
            pset = snapshot.load_set(set_name)  # a name, or a snapshot file (assets.snapshot.export)
            set_name = pset.name
            items = pset.split("heldout")[: int(preset["n"])]
            for mode, params in modes:
                log.info("target %s, set %s (%d prompts), %s, %d configs", target, set_name, len(items), mode,
                         len(configs))
                res = runner.run(ctx, configs, items, params, progress=cfg.progress)
                cost = ctx.cost_for()  # medians of the timing rounds taken through this target's runs
                run = {"target": target, "set": pset.describe(), "mode": mode, "cost_model": cost.as_dict(),
                       "kernels": session.plan.as_dict(),
                       "cost_samples": ctx.costs.samples(),
                       "max_verify_batch": session.max_verify_batch, "gpu_layers": cfg.gpu_layers,
                       "threads": session.target.config.threads()[0],
                       "draft_threads": session.draft.live_threads,
                       "verify_batch_forced": bool(cfg.verify_batch), "results": res,
                       "ceiling": _ceiling(cost, ks), "ngram_cache": session.pair.cache.stats(),
                       "peak_rss_mb": runner.peak_rss_mb()}
                data["runs"].append(run)
                prefix = out_dir / f"{tag}-{Path(target).name.replace(':', '-')}-{set_name}-{mode}"
                pngs = report.plots(res, prefix) if cfg.plots else []
                md += [f"### {set_name} ({len(items)} held-out prompts, {params.max_tokens} tokens, {mode})", "",
                       f"Target kernels: {session.plan.mode} (verification batches up to {session.plan.max_batch}"
                       + (f", near-tie guard {session.plan.guard:.2g})" if session.plan.guard else ", bit-identical)")
                       + (f"; forced to batches of up to {cfg.verify_batch} (--verify-batch: exactness not promised)"
                          if cfg.verify_batch else "")
                       + (f"; {cfg.gpu_layers} layers on the GPU" if cfg.gpu_layers else "")
                       + f"; {run['threads']} threads ({run['draft_threads']} for the drafter)",
                       "",
                       f"Cost model (medians of {ctx.costs.samples()} timing rounds taken through the run):", "",
                       report.cost_table(cost.as_dict()), "", report.results_table(res), "",
                       "Per step (ms, share of the step):", "", report.step_table(res), "",
                       report.adaptive_notes(res), "",
                       "Ceiling at 100 % acceptance: " + ", ".join(f"k={k}: {v:.2f}x" for k, v in run["ceiling"].items()),
                       ""] + [f"![{p.stem}]({p.name})" for p in pngs] + [""]
                print(report.results_table(res), "", report.step_table(res), sep="\n", flush=True)
        ctx.close()
        session.close()
    report.write_json(out_dir / f"{tag}.json", data)
    (out_dir / f"{tag}.md").write_text("\n".join(md))
    print(f"\nwrote {out_dir / (tag + '.json')} and {out_dir / (tag + '.md')}")
    return 0


def _configs(methods: list[str], ks: list[int], adaptive: bool, same_vocab: bool, gamma: bool = True,
             adaptive_k: int = 0):
    if adaptive and not adaptive_k and not ks:
        raise SystemExit("bench run: with --ks '' the adaptive drafts need a length: give --adaptive-k N")
    out = []
    for m in methods:
        if m == "target":
            out.append(Config("target"))
            continue
        if m == "same-vocab" and not same_vocab:
            continue
        out += [Config(m, k, "fixed") for k in ks]
        if adaptive:
            out.append(Config(m, adaptive_k or max(ks), "cost"))
            if m == "omnidraft" and gamma:
                out.append(Config(m, adaptive_k or max(ks), "gamma"))  # the paper's stopping rule, for comparison
    if not any(c.method == "target" for c in out):
        out.insert(0, Config("target"))
    return out


def _ceiling(cost, ks: list[int]) -> dict[int, float]:
    return {k: cost.predicted_speedup(k, 1.0) for k in ks}


def _argv_of() -> list[str]:
    return sys.argv[sys.argv.index("run") + 1:] if "run" in sys.argv else []


def _cmd_kernels(cfg: KernelsSettings) -> int:
    prefixes = tuple(int(x) for x in _csv(cfg.prefixes))
    rows = []
    for target in _csv(cfg.targets):
        path = models.resolve(target)
        for mode in KernelMode:
            ecfg = EngineConfig(n_ctx=2048, n_threads=cfg.threads, batch_invariant=mode.batch_invariant)
            with Engine(path, ecfg) as e:
                fid = invariance.measure(e, prefixes=prefixes)
            plan = invariance.plan_for(fid)
            row = dict(target=target, file=path.name, threads=ecfg.threads()[0], **fid.as_dict(),
                       ratio={n: fid.t(n) / fid.t(1) for n in (2, 4, 8)},
                       plan=plan.as_dict() if plan else None,
                       score=invariance.score(fid, plan) if plan else 0.0)
            rows.append(row)
            log.info("%s %s: %s", target, mode, row)
    md = ["| target | kernels | T(1) | T(2)/T(1) | T(4)/T(1) | T(8)/T(1) | rows compared | bit-identical up to | "
          "max abs diff | argmax flips | verification plan |", "|---|---|---|---|---|---|---|---|---|---|---|"]
    for r in rows:
        p = r["plan"]
        plan = "never verifies" if p is None else (f"batches <= {p['max_batch']}" +
                                                  (f", guard {p['guard']:.2g}" if p["guard"] else ", exact"))
        md.append(f"| {r['target']} | {r['mode']} | {r['t_pass']['1'] * 1e3:.1f} ms | {r['ratio'][2]:.2f} | "
                  f"{r['ratio'][4]:.2f} | {r['ratio'][8]:.2f} | {r['positions']} | {r['max_identical']} | "
                  f"{r['bound']:.3g} | {r['flips']} | {plan} |")
    tag = runner.now_tag()
    out = Path(cfg.out)
    out.mkdir(parents=True, exist_ok=True)
    report.write_json(out / f"kernels-{tag}.json", {"machine": report.machine(), "rows": rows})
    (out / f"kernels-{tag}.md").write_text("\n".join(md) + "\n")
    print("\n".join(md))
    print(f"\nwrote {out / f'kernels-{tag}.json'}")
    return 0


def _cmd_costmodel(cfg: CostmodelSettings) -> int:
    target_path = models.resolve(cfg.target)
    draft_path = models.resolve(cfg.draft)
    work = models.cache_dir() / "quant-sweep"
    work.mkdir(parents=True, exist_ok=True)
    rows, data = [], {"machine": report.machine(), "target": cfg.target, "draft": cfg.draft, "sweep": []}
    for q in _csv(cfg.quants):
        path = target_path if q == "q4_k_m" else work / f"{target_path.stem}-{q}.gguf"
        if not path.exists():
            log.info("quantizing %s -> %s", target_path.name, q)
            with from_gguf_tools():
                quantize(target_path, path, q, log_tail=llama_log.SINK.take_recent)
        for th in (int(t) for t in _csv(cfg.threads_list)):
            with Engine(path, EngineConfig(n_ctx=1024, n_threads=th)) as t, \
                    Engine(draft_path, EngineConfig(n_ctx=1024, n_threads=th, batch_invariant=False)) as d:
                tv = time_passes(t, range(1, cfg.max_n + 1))
                td = time_passes(d, range(1, 2))[1]

            cm = CostModel(tv, td)
            entry = {"quant": q, "threads": th, "cost_model": cm.as_dict(),
                     "ceiling": {k: cm.predicted_speedup(k, 1.0) for k in range(1, cfg.max_n)},
                     "at_acceptance": {a: {k: cm.predicted_speedup(k, a) for k in range(1, cfg.max_n)}
                                       for a in (0.3, 0.5, 0.7, 0.9)}}
            data["sweep"].append(entry)
            best = max(entry["at_acceptance"][0.5].items(), key=lambda kv: kv[1])
            rows.append(f"| {q} | {th} | {tv[1] * 1e3:.1f} | {tv[4] * 1e3:.1f} ({tv[4] / tv[1]:.2f}x) | "
                        f"{tv[8] * 1e3 if 8 in tv else float('nan'):.1f} | {td * 1e3:.1f} | "
                        f"{max(entry['ceiling'].values()):.2f}x | k={best[0]}: {best[1]:.2f}x |")
    table = ("| quant | threads | T_decode(1) ms | T_verify(4) ms | T_verify(8) ms | T_draft ms | ceiling (100 %) "
             "| best at 50 % acceptance |\n|---|---|---|---|---|---|---|---|\n" + "\n".join(rows))
    print(table)
    tag = runner.now_tag()
    report.write_json(Path(cfg.out) / f"costmodel-{tag}.json", data)
    (Path(cfg.out) / f"costmodel-{tag}.md").write_text(table + "\n")
    return 0


def _cmd_peer(cfg: PeerSettings) -> int:
    items = [i for i in prompts.load(cfg.set).split("heldout") if not i.chat][: cfg.n]
    texts = [i.prompt for i in items]
    session = Session(Settings(target=cfg.target, draft=cfg.draft, threads=cfg.threads, method="omnidraft"))
    ctx = runner.BenchContext(session)
    ours = {}
    for method in ("slem", "omnidraft"):
        gen = ctx.generator(runner.Config(method, cfg.k, "fixed"))
        total = GenerationStats(method)
        for t in texts:
            total.add(gen.generate(gen.prompt_from_text(t), GenerationParams(max_tokens=cfg.max_tokens)).stats)
        ours[method] = {"tokens": total.completion_tokens, "target_passes": total.target_passes, "tau": total.tau}
    session.close()
    tp, dp = models.resolve(cfg.target), models.resolve(cfg.draft)
    hf = {f"hf-uag k={cfg.k}": peer.run_peer(tp, dp, texts, cfg.max_tokens, cfg.k),
          "hf-uag (its own schedule)": peer.run_peer(tp, dp, texts, cfg.max_tokens, None)}
    rows = [f"| ours: {m} k={cfg.k} | {r['tokens']} | {r['target_passes']} | {r['tau']:.2f} |"
            for m, r in ours.items()]
    rows += [f"| {name} | {r['tokens']} | {r['target_passes']} | {r['tau']:.2f} |" for name, r in hf.items()]
    table = "| run | tokens | target passes | tau |\n|---|---|---|---|\n" + "\n".join(rows)
    print(table)
    tag = runner.now_tag()
    report.write_json(Path(cfg.out) / f"peer-{tag}.json", {"machine": report.machine(), "args": asdict(cfg),
                                                       "prompts": [i.id for i in items], "ours": ours, "hf": hf})
    (Path(cfg.out) / f"peer-{tag}.md").write_text(table + "\n")
    return 0
