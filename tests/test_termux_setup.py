"""android_demo/termux/setup.sh, run as far as this x86 machine allows: its own logic, on a fake Termux.

No phone and no Android NDK are to be had here.  The compiler, pip and the phone's CPU are what the script
cannot get, so a fake Termux stands in for them: ``PREFIX`` and a ``pkg`` that logs, a venv whose ``python``
logs pip's installs and answers the build probe as told, and ``omnidraft`` that logs.  ``build.py``'s
``cmake-args`` and ``wants-kernel`` are the real ones, run as on an aarch64 Linux (``platform.machine``
patched), so the flags asserted are those a phone's build gets.  What runs for real on ARM code is in
test_arm_ggml.py and test_arm_llama.py (cross-built, under qemu).
"""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[1]
SETUP = REPO / "android_demo" / "termux" / "setup.sh"

# The venv's python: real build.py answers for cmake-args / wants-kernel (as aarch64 Linux), a simulated
# installed build for check, and logged stand-ins for pip, the build probe and the patched sources.
VENV_PYTHON = """#!/usr/bin/env bash
echo "python $*" >> "$FAKE_LOG"
if [ "${{1:-}}" = "{build_py}" ]; then
  case "$2" in
    cmake-args|wants-kernel)
      exec {real} -c 'import platform, runpy, sys; platform.machine = lambda: "aarch64"; sys.platform = "linux"
sys.argv = sys.argv[1:]; runpy.run_path(sys.argv[0], run_name="__main__")' "$@" ;;
    source) echo "$3/llama_cpp_python-0.3.36"; exit 0 ;;
    check) [ -f "$FAKE_VENV/.installed" ] && [ "$(cat "$FAKE_VENV/.installed")" != failed ]; exit $? ;;
  esac
fi
if [ "${{1:-}}" = -m ] && [ "$2" = pip ]; then
  echo "pip CMAKE_ARGS=${{CMAKE_ARGS:-}} $*" >> "$FAKE_LOG"
  case "$*" in *llama*) echo "${{@: -1}}" > "$FAKE_VENV/.installed" ;; esac
  exit 0
fi
if [ "${{1:-}}" = -m ] && [ "$2" = omnidraft.llama.buildprobe ]; then
  case "$(cat "$FAKE_VENV/.installed")" in *llama_cpp_python-0.3.36) [ -z "${{FAKE_PATCHED_PROBE_FAILS:-}}" ] ;; *) true ;; esac
  exit $?
fi
exit 0
"""


def _stub(path: Path, text: str) -> None:
    path.write_text(text)
    path.chmod(0o755)


@pytest.fixture
def termux(tmp_path):
    """A fake Termux: PREFIX, pkg, a `python` that makes the fake venv; returns (env, log path, venv)."""
    prefix, bindir, venv, log = tmp_path / "usr", tmp_path / "bin", tmp_path / "venv", tmp_path / "log"
    prefix.mkdir()
    bindir.mkdir()
    log.write_text("")
    venv_python = VENV_PYTHON.format(build_py=REPO / "backend" / "omnidraft" / "llama" / "build.py",
                                     real=sys.executable)
    _stub(bindir / "pkg", '#!/usr/bin/env bash\necho "pkg $*" >> "$FAKE_LOG"\n')
    # `python -m venv --system-site-packages DIR`: the fake venv, with its python and omnidraft
    _stub(bindir / "python", f"""#!/usr/bin/env bash
echo "host-python $*" >> "$FAKE_LOG"
mkdir -p "$FAKE_VENV/bin"
cat > "$FAKE_VENV/bin/python" <<'EOF'
{venv_python}EOF
chmod +x "$FAKE_VENV/bin/python"
printf '#!/usr/bin/env bash\\necho "omnidraft $*" >> "$FAKE_LOG"\\n' > "$FAKE_VENV/bin/omnidraft"
chmod +x "$FAKE_VENV/bin/omnidraft"
""")
    env = {k: v for k, v in os.environ.items() if k not in ("CMAKE_ARGS", "OMNIDRAFT_SBQ4", "OMNIDRAFT_TARGET")}
    env.update(PATH=f"{bindir}{os.pathsep}{env['PATH']}", PREFIX=str(prefix), FAKE_LOG=str(log),
               FAKE_VENV=str(venv), OMNIDRAFT_VENV=str(venv))
    return env, log, venv


def _run(env: dict) -> subprocess.CompletedProcess:
    return subprocess.run(["bash", str(SETUP)], env=env, capture_output=True, text=True, timeout=120)


def _pip_llama(log: Path) -> list[str]:
    return [line for line in log.read_text().splitlines() if line.startswith("pip ") and "llama" in line]


def test_setup_refuses_outside_termux(termux):
    env, log, _ = termux
    del env["PREFIX"]
    r = _run(env)
    assert r.returncode == 2 and "for Termux on Android" in r.stderr and "scripts/setup/setup.sh" in r.stderr
    assert log.read_text() == ""  # nothing installed, nothing built


def test_setup_builds_the_patched_sources_with_the_phones_flags_and_pulls_the_pair(termux):
    env, log, venv = termux
    r = _run(env)
    assert r.returncode == 0, r.stdout + r.stderr
    lines = log.read_text().splitlines()
    pkg = next(line for line in lines if line.startswith("pkg install"))
    for name in ("python", "python-pip", "python-numpy", "clang", "cmake", "ninja", "git"):
        assert f" {name}" in pkg
    assert f"host-python -m venv --system-site-packages {venv}" in lines
    (build,) = _pip_llama(log)
    # build.py's aarch64 native tier: ggml probes the phone's dotprod / i8mm itself; never llamafile's kernels
    assert "-DGGML_NATIVE=ON" in build and "-DGGML_LLAMAFILE=OFF" in build and "-DGGML_AVX" not in build
    assert build.endswith(f"{venv}/src/llama_cpp_python-0.3.36")  # the patched tree build.py prepared
    assert f"python {REPO}/backend/omnidraft/llama/build.py source {venv}/src" in lines
    assert "python -m omnidraft.llama.buildprobe" in lines
    assert "omnidraft models pull smollm2-135m-d8-qwen qwen2.5-coder-0.5b" in lines
    assert not (venv / ".llama-sources").exists()

    log.write_text("")  # a second run: the build passes its check, nothing is rebuilt
    assert _run(env).returncode == 0
    assert _pip_llama(log) == [] and "python -m omnidraft.llama.buildprobe" in log.read_text()


def test_a_patched_build_that_fails_its_probe_falls_back_to_upstream_and_remembers(termux):
    env, log, venv = termux
    env["FAKE_PATCHED_PROBE_FAILS"] = "1"
    r = _run(env)
    assert r.returncode == 0, r.stdout + r.stderr
    assert "rebuilding the upstream sources" in r.stderr
    patched, upstream = _pip_llama(log)
    assert patched.endswith("llama_cpp_python-0.3.36") and upstream.endswith("llama-cpp-python==0.3.36")
    assert "-DGGML_NATIVE=ON" in upstream
    assert (venv / ".llama-sources").read_text().strip() == "upstream"
    # the next run does not try the patch again: the check runs with the kernels not wanted
    log.write_text("")
    (venv / ".installed").write_text("failed")  # force a rebuild to see which sources it takes
    assert _run(env).returncode == 0
    (again,) = _pip_llama(log)
    assert again.endswith("llama-cpp-python==0.3.36")
