"""Bounded load run against a running server: throughput, p50/p99 latency, errors.

    python -m omnidraft.server.loadtest --url http://127.0.0.1:8080 --requests 200 --concurrency 4 --max-tokens 8

Writes results/loadtest-<time>.json and prints a markdown table.
"""

from __future__ import annotations

import argparse
import json
import platform
import statistics
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import requests

PROMPTS = [
    "def fibonacci(n):\n",
    "# Sort a list of dictionaries by the key 'age'\n",
    "class Stack:\n    def __init__(self):\n",
    "def read_csv(path):\n    \"\"\"Return the rows of a CSV file as dicts.\"\"\"\n",
    "import json\n\ndef load_config(path):\n",
    "def is_palindrome(s: str) -> bool:\n",
]


def _percentile(xs: list[float], q: float) -> float:
    if not xs:
        return float("nan")
    xs = sorted(xs)
    i = min(len(xs) - 1, max(0, round(q / 100 * (len(xs) - 1))))
    return xs[i]


def run(url: str, n: int, concurrency: int, max_tokens: int, chat: bool = False, api_key: str = "",
        timeout: float = 300.0) -> dict:
    headers = {"Authorization": f"Bearer {api_key}"} if api_key else {}
    path = "/v1/chat/completions" if chat else "/v1/completions"
    session = requests.Session()

    def one(i: int) -> dict:
        p = PROMPTS[i % len(PROMPTS)]
        body = {"max_tokens": max_tokens, "temperature": 0}
        body.update({"messages": [{"role": "user", "content": p}]} if chat else {"prompt": p})
        t0 = time.perf_counter()
        try:
            r = session.post(url + path, json=body, headers=headers, timeout=timeout)
            ok = r.status_code == 200
            toks = r.json()["usage"]["completion_tokens"] if ok else 0
            return {"status": r.status_code, "latency_s": time.perf_counter() - t0, "tokens": toks}
        except (requests.RequestException, ValueError, KeyError) as e:
            return {"status": 0, "latency_s": time.perf_counter() - t0, "tokens": 0, "error": type(e).__name__}

    t0 = time.perf_counter()
    with ThreadPoolExecutor(concurrency) as ex:
        rows = list(ex.map(one, range(n)))
    wall = time.perf_counter() - t0
    lat = [r["latency_s"] for r in rows if r["status"] == 200]
    tokens = sum(r["tokens"] for r in rows)
    codes: dict[str, int] = {}
    for r in rows:
        codes[str(r["status"])] = codes.get(str(r["status"]), 0) + 1
    return {
        "url": url, "endpoint": path, "requests": n, "concurrency": concurrency, "max_tokens": max_tokens,
        "wall_s": wall, "ok": len(lat), "errors": n - len(lat), "status_codes": codes,
        "requests_per_s": len(lat) / wall if wall else 0.0, "tokens_per_s": tokens / wall if wall else 0.0,
        "completion_tokens": tokens,
        "latency_p50_s": _percentile(lat, 50), "latency_p99_s": _percentile(lat, 99),
        "latency_mean_s": statistics.fmean(lat) if lat else float("nan"),
        "machine": platform.platform(), "time": time.strftime("%Y-%m-%dT%H:%M:%S"),
    }


def markdown(res: dict) -> str:
    return "\n".join([
        "| requests | concurrency | max_tokens | ok | errors | req/s | completion tok/s | p50 latency | p99 latency |",
        "|---:|---:|---:|---:|---:|---:|---:|---:|---:|",
        f"| {res['requests']} | {res['concurrency']} | {res['max_tokens']} | {res['ok']} | {res['errors']} | "
        f"{res['requests_per_s']:.2f} | {res['tokens_per_s']:.1f} | {res['latency_p50_s'] * 1e3:.0f} ms | "
        f"{res['latency_p99_s'] * 1e3:.0f} ms |",
    ])


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="python -m omnidraft.server.loadtest", description=__doc__.split("\n")[0])
    ap.add_argument("--url", default="http://127.0.0.1:8080", help="server base URL")
    ap.add_argument("--requests", type=int, default=200, help="requests in total (bounded run)")
    ap.add_argument("--concurrency", type=int, default=4, help="clients at once")
    ap.add_argument("--max-tokens", type=int, default=8, help="max_tokens per request")
    ap.add_argument("--chat", action="store_true", help="use /v1/chat/completions")
    ap.add_argument("--api-key", default="", help="Bearer key, if the server needs one")
    ap.add_argument("--out", default="results", help="directory for the JSON result")
    a = ap.parse_args(argv)
    if a.requests < 1 or a.concurrency < 1 or a.max_tokens < 1:
        ap.error("--requests, --concurrency and --max-tokens must be >= 1")
    res = run(a.url.rstrip("/"), a.requests, a.concurrency, a.max_tokens, a.chat, a.api_key)
    out = Path(a.out)
    out.mkdir(parents=True, exist_ok=True)
    path = out / f"loadtest-{time.strftime('%Y%m%d-%H%M%S')}.json"
    path.write_text(json.dumps(res, indent=1))
    print(markdown(res))
    print(f"\nstatus codes: {res['status_codes']}; wall {res['wall_s']:.1f} s; written to {path}")
    return 0 if res["errors"] == 0 else 1


if __name__ == "__main__":
    raise SystemExit(main())
