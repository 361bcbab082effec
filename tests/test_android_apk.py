"""The Android WebView shell APK builds offline and verifies; the demo's shell scripts pass shellcheck.

Needs Debian's apktool, aapt, zipalign, apksigner, android-framework-res, a JDK (keytool) and
shellcheck (android_demo/ci_setup.sh installs them).  Without them the tests skip, except under CI.
"""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import zipfile
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[1]
DEMO = REPO / "android_demo"
APK_TOOLS = ("apktool", "aapt", "zipalign", "apksigner", "keytool")
SCRIPTS = [DEMO / "apk" / "build.sh", DEMO / "ci_setup.sh", *sorted((DEMO / "termux").glob("*.sh"))]


def _need(*tools: str) -> None:
    missing = [t for t in tools if shutil.which(t) is None]
    if missing:
        msg = f"missing {', '.join(missing)} (android_demo/ci_setup.sh installs them)"
        if os.environ.get("CI"):
            pytest.fail(msg)
        pytest.skip(msg)


def run(*cmd: str, **kw) -> str:
    p = subprocess.run(cmd, capture_output=True, text=True, timeout=240, **kw)
    assert p.returncode == 0, f"{' '.join(cmd)} -> {p.returncode}\n{p.stdout}\n{p.stderr}"
    return p.stdout


@pytest.fixture(scope="module")
def apk(tmp_path_factory) -> Path:
    _need(*APK_TOOLS)
    out = tmp_path_factory.mktemp("apk")
    env = {**os.environ, "OUT_DIR": str(out), "OMNIDRAFT_URL": "http://127.0.0.1:8080/app/?src=apk&a=1"}
    run("bash", str(DEMO / "apk" / "build.sh"), env=env)
    path = out / "omnidraft-demo.apk"
    assert path.is_file()
    return path


def test_apk_signature_verifies(apk):
    out = run("apksigner", "verify", "--verbose", str(apk))
    assert out.startswith("Verifies")
    assert "Verified using v2 scheme (APK Signature Scheme v2): true" in out


def test_apk_badging(apk):
    out = run("aapt", "dump", "badging", str(apk))
    assert "package: name='org.omnidraft.demo'" in out
    assert "launchable-activity: name='org.omnidraft.demo.MainActivity'" in out
    assert "uses-permission: name='android.permission.INTERNET'" in out
    assert "application-label:'omnidraft'" in out
    assert re.search(r"sdkVersion:'24'", out) and "application-icon-640:" in out


def test_apk_manifest_and_default_url(apk):
    tree = run("aapt", "dump", "xmltree", str(apk), "AndroidManifest.xml")
    assert re.search(r"usesCleartextTraffic\(0x010104ec\)=\(type 0x12\)0xffffffff", tree)
    assert re.search(r"exported\(0x01010010\)=\(type 0x12\)0xffffffff", tree)
    values = run("aapt", "dump", "--values", "resources", str(apk))
    # the build bakes OMNIDRAFT_URL in (sed-escaping '&' correctly)
    assert '"http://127.0.0.1:8080/app/?src=apk&a=1"' in values
    with zipfile.ZipFile(apk) as z:
        names = set(z.namelist())
        assert "classes.dex" in names and "res/mipmap-xxxhdpi-v4/ic_launcher.png" in names
        dex = z.read("classes.dex")
    for cls in (b"Lorg/omnidraft/demo/MainActivity;", b"Lorg/omnidraft/demo/ShellClient;"):
        assert cls in dex
    for method in (b"onCreate", b"resolveUrl", b"onNewIntent", b"onBackPressed", b"onReceivedError",
                   b"setDomStorageEnabled", b"setJavaScriptEnabled"):
        assert method in dex


def test_no_keystore_or_apk_committed():
    tracked = subprocess.run(["git", "ls-files", "android_demo"], cwd=REPO, capture_output=True, text=True).stdout
    assert not re.search(r"\.(keystore|jks|apk)$", tracked, re.M)


@pytest.mark.parametrize("script", SCRIPTS, ids=lambda p: str(p.relative_to(DEMO)))
def test_shellcheck(script):
    _need("shellcheck")
    run("shellcheck", "--severity=style", str(script))
