"""`pip wheel .` builds a wheel that holds every module and the phone web app, and a server from it serves /app.

The wheel is built from a copy of the checkout (its tracked and new files), without build isolation (the
venv's setuptools, no download), and installed with --no-deps into a folder that alone is on PYTHONPATH:
the dependencies (llama-cpp-python, flask, ...) come from this venv, nothing is compiled again.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import urllib.request
import zipfile
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[1]
APP = REPO / "android_demo" / "app"

# Runs with only the installed wheel on the path: the app factory around a stand-in session (no model),
# on waitress, the server `omnidraft serve` uses.  Prints where omnidraft came from and the URL, then serves.
SERVE = r"""
import json, sys
from types import SimpleNamespace
from waitress.server import create_server
import omnidraft
from omnidraft.server import ServerConfig, create_app
from omnidraft.server.config import DEFAULT_APP_DIR
session = SimpleNamespace(settings=SimpleNamespace(target="fake-target", draft="fake-draft", method="omnidraft",
                                                   n_ctx=64), drafter_version="v0", n_ctx=64)
app = create_app(session, ServerConfig(), start_worker=False)
srv = create_server(app, host="127.0.0.1", port=0, threads=2)
print(json.dumps({"module": omnidraft.__file__, "app_dir": str(DEFAULT_APP_DIR),
                  "url": f"http://127.0.0.1:{srv.effective_port}"}), flush=True)
srv.run()
"""


def _copy_checkout(dst: Path) -> Path:
    files = subprocess.run(["git", "ls-files", "-z", "--cached", "--others", "--exclude-standard"], cwd=REPO,
                           capture_output=True, text=True, check=True).stdout.split("\0")
    for rel in filter(None, files):
        src = REPO / rel
        if src.is_file():
            (dst / rel).parent.mkdir(parents=True, exist_ok=True)
            shutil.copy2(src, dst / rel)
    return dst


@pytest.fixture(scope="module")
def wheel(tmp_path_factory) -> Path:
    src = _copy_checkout(tmp_path_factory.mktemp("src"))
    out = tmp_path_factory.mktemp("dist")
    r = subprocess.run([sys.executable, "-m", "pip", "wheel", str(src), "--no-deps", "--no-build-isolation",
                        "-q", "-w", str(out)], capture_output=True, text=True, timeout=120)
    assert r.returncode == 0, r.stderr[-3000:]
    (whl,) = out.glob("omnidraft-*.whl")
    return whl


def test_wheel_holds_every_module_and_the_app_with_its_licences(wheel):
    names = set(zipfile.ZipFile(wheel).namelist())
    modules = {f"omnidraft/{p.relative_to(REPO / 'backend' / 'omnidraft').as_posix()}"
               for p in (REPO / "backend" / "omnidraft").rglob("*.py")}
    modules |= {p.relative_to(REPO).as_posix() for p in (REPO / "gguf_tools").rglob("*.py")}
    assert modules - names == set(), "modules missing from the wheel: list them in pyproject.toml"
    app_files = {f"omnidraft/webapp/{p.relative_to(APP).as_posix()}" for p in APP.rglob("*") if p.is_file()}
    assert app_files - names == set(), "app files missing from the wheel: see [tool.setuptools.package-data]"
    for f in ("index.html", "sw.js", "js/markdown.js", "vendor/marked/marked.esm.js", "vendor/marked/LICENSE.md",
              "vendor/dompurify/purify.es.js", "vendor/dompurify/LICENSE", "vendor/dompurify/LICENSE-MPL"):
        assert f"omnidraft/webapp/{f}" in names


def test_a_server_installed_from_the_wheel_serves_the_app(wheel, tmp_path):
    site = tmp_path / "site"
    r = subprocess.run([sys.executable, "-m", "pip", "install", "-q", "--no-deps", "--no-compile", "--target",
                        str(site), str(wheel)], capture_output=True, text=True, timeout=120)
    assert r.returncode == 0, r.stderr[-3000:]
    env = {**os.environ, "PYTHONPATH": str(site)}
    proc = subprocess.Popen([sys.executable, "-c", SERVE], cwd=tmp_path, env=env, stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, text=True)
    try:
        line = proc.stdout.readline()
        assert line, proc.stderr.read()[-3000:] if proc.poll() is not None else "no output"
        info = json.loads(line)
        assert Path(info["module"]).is_relative_to(site), info      # not the checkout's editable install
        assert Path(info["app_dir"]) == site / "omnidraft" / "webapp"
        for path, needle in (("/app/", b"<title>omnidraft</title>"), ("/app/js/markdown.js", b"renderMarkdown"),
                             ("/app/vendor/marked/marked.esm.js", b"marked v"),
                             ("/app/vendor/dompurify/purify.es.js", b"DOMPurify")):
            with urllib.request.urlopen(info["url"] + path, timeout=10) as resp:
                assert resp.status == 200 and needle in resp.read(), path
                if path.endswith(".js"):  # module scripts need a JavaScript MIME type
                    assert "javascript" in resp.headers["Content-Type"], (path, resp.headers["Content-Type"])
    finally:
        proc.terminate()
        proc.wait(10)
