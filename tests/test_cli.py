"""The `omnidraft` command line, as a user runs it."""

import subprocess
import sys

import pytest

from tests.serve_helpers import seed_state


def run(*args, timeout=300):
    return subprocess.run([sys.executable, "-m", "omnidraft.apps.cli", *args], capture_output=True, text=True,
                          timeout=timeout)


def test_generate_prints_code_and_a_summary_for_a_humaneval_style_prompt(tmp_path):
    prompt = 'def is_even(n: int) -> bool:\n    """Return True if n is even."""\n'
    r = run("generate", "--max-tokens", "32", "--threads", "2", "--policy", "fixed", "-k", "3",
            "--state-dir", str(seed_state(tmp_path)), prompt)
    assert r.returncode == 0, r.stderr[-2000:]
    assert "return" in r.stdout and "%" in r.stdout  # n % 2
    summary = r.stderr.strip().splitlines()[-1]
    assert "[hybrid]" in summary and "tokens/target pass" in summary and "acceptance" in summary


def test_generate_json_reports_statistics(tmp_path):
    import json

    r = run("generate", "--json", "--chat", "--max-tokens", "16", "--threads", "2", "--method", "tli",
            "--policy", "fixed", "--state-dir", str(seed_state(tmp_path)), "Say hello.")
    assert r.returncode == 0, r.stderr[-2000:]
    out = json.loads(r.stdout)
    assert out["stats"]["method"] == "tli" and out["stats"]["target_passes"] >= 1
    assert out["finish_reason"] in ("stop", "length") and out["text"]


@pytest.mark.parametrize("args,needle", [
    (["generate", "--target", "/nonexistent/model.gguf", "x"], "not a file and not a known model"),
    (["generate", "--method", "nope", "x"], "unknown method"),
    (["models", "pull", "gpt-9"], "unknown model"),
    (["models", "pull", "qwen2.5-coder-0.5b:q9_9"], "unknown quantization"),
])
def test_bad_input_is_one_clear_line_and_exit_2(args, needle, tmp_path):
    r = run(*args, "--state-dir", str(tmp_path)) if args[0] == "generate" else run(*args)
    assert r.returncode == 2
    assert needle in r.stderr and "Traceback" not in r.stderr


def test_pull_names_a_requantized_copy():
    """`models pull NAME:QTYPE` makes the copy once (make test pulled this one) and prints where it is."""
    from omnidraft.assets import models

    r = run("models", "pull", f"{models.QWEN_05B}:q4_0")
    assert r.returncode == 0, r.stderr[-2000:]
    path = models.derived_path(models.QWEN_05B, "q4_0")
    assert str(path) in r.stdout and path.is_file()


_IMPORTED = """
import sys
from omnidraft.apps.cli import main
try:
    main(sys.argv[1:])
except SystemExit:
    pass
print("loaded:", *(m for m in ("omnidraft.bench.cli", "omnidraft.server.cli", "flask", "omnidraft.apps.adapt")
                   if m in sys.modules))
"""
EVERY = "omnidraft.bench.cli omnidraft.server.cli flask omnidraft.apps.adapt"


@pytest.mark.parametrize("argv,loaded", [(["generate", "--help"], ""), (["models", "list"], ""),
                                         (["serve", "--help"], EVERY)])
def test_a_command_of_the_cli_module_loads_no_other_commands_modules(argv, loaded):
    """`generate`, `models` and `doctor` start without bench, the server or adapt (0.48 s against 0.89 for
    `generate --help`); any other command line builds the whole parser."""
    r = subprocess.run([sys.executable, "-c", _IMPORTED, *argv], capture_output=True, text=True, timeout=120)
    assert r.returncode == 0, r.stderr[-2000:]
    assert r.stdout.splitlines()[-1] == f"loaded: {loaded}".strip()


@pytest.mark.parametrize("sub", [[], ["models"], ["generate"], ["bench"], ["bench", "run"], ["gguf"]])
def test_help_works_everywhere(sub):
    r = run(*sub, "--help", timeout=60)
    assert r.returncode == 0 and "usage" in r.stdout.lower()


def test_a_killed_adapt_unwinds_like_ctrl_c():
    """``omnidraft adapt`` turns SIGTERM into SystemExit, so that its finally stops the trainer child."""
    import os
    import signal
    import time

    from omnidraft.apps import cli

    old = signal.getsignal(signal.SIGTERM)
    try:
        cli.exit_on_sigterm()
        with pytest.raises(SystemExit) as e:
            os.kill(os.getpid(), signal.SIGTERM)
            time.sleep(5)  # the handler runs at the next bytecode; never reached
        assert e.value.code == 128 + signal.SIGTERM
    finally:
        signal.signal(signal.SIGTERM, old)
