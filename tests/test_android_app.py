"""The Android demo app (android_demo/app) end to end in headless Chromium with Android emulation.

A Pixel-7-sized touch screen (412x915, DPR 2.625, mobile Chrome user agent) against a server on
loopback: the fake server of tests/fake_omnidraft_server.py by default, or the real `omnidraft serve`
with OMNIDRAFT_E2E_REAL=1 (needs the default model pair).  Screenshots go to test-artifacts/android/.

Needs Debian's chromium and the Python `playwright` package (no browser download): see
android_demo/ci_setup.sh.  Without them the tests skip, except under CI (CI=1), where they fail.
"""

from __future__ import annotations

import json
import os
import shutil
import urllib.request
from pathlib import Path

import pytest

from fake_omnidraft_server import ServerThread, create_app
from serve_helpers import serve_process

REPO = Path(__file__).resolve().parents[1]
ARTIFACTS = REPO / "test-artifacts" / "android"
REAL = os.environ.get("OMNIDRAFT_E2E_REAL") == "1"
CHROMIUM = os.environ.get("OMNIDRAFT_CHROMIUM") or shutil.which("chromium") or shutil.which("chromium-browser")
CHROMIUM_FLAGS = ["--headless", "--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run",
                  "--disable-background-networking", "--disable-component-update", "--disable-sync"]
PIXEL_7 = dict(viewport={"width": 412, "height": 915}, screen={"width": 412, "height": 915},
               device_scale_factor=2.625, is_mobile=True, has_touch=True,
               user_agent="Mozilla/5.0 (Linux; Android 14; Pixel 7) AppleWebKit/537.36 (KHTML, like Gecko) "
                          "Chrome/150.0.0.0 Mobile Safari/537.36")
PROMPT = "Write a Python function that checks whether a number is prime."


def _unavailable(reason: str):
    if os.environ.get("CI"):
        pytest.fail(f"{reason} (CI must run these: call android_demo/ci_setup.sh)")
    pytest.skip(reason)


# ---------------------------------------------------------------- fixtures
def _warm_up(url: str) -> None:
    """The real server calibrates its cost model on the first generation (slow on a busy machine)."""
    body = json.dumps({"messages": [{"role": "user", "content": "hi"}], "max_tokens": 4,
                       "stream": False}).encode()
    req = urllib.request.Request(url + "/v1/chat/completions", body, {"Content-Type": "application/json"})
    with urllib.request.urlopen(req, timeout=300) as r:
        assert r.status == 200


@pytest.fixture(scope="module")
def server():
    """(base URL, fake app or None).  The real server: `serve_helpers.serve_process`."""
    if not REAL:
        app = create_app(delay=0.04)
        with ServerThread(app) as s:
            yield s.url, app
        return
    # the same process the server tests start (free loopback port, private state dir), its log kept here
    with serve_process(ARTIFACTS / "serve", ready_s=240) as url:
        _warm_up(url)
        yield url, None


@pytest.fixture(scope="module")
def browser():
    try:
        from playwright.sync_api import sync_playwright
    except ImportError:
        _unavailable("the Python package `playwright` is not installed")
    if not CHROMIUM:
        _unavailable("no chromium executable (apt-get install chromium)")
    with sync_playwright() as p:
        b = p.chromium.launch(executable_path=CHROMIUM, args=CHROMIUM_FLAGS)
        yield b
        b.close()


@pytest.fixture
def phone(browser, tmp_path):
    """A fresh page in a Pixel-7-like context (own storage, service workers allowed)."""
    ctx = browser.new_context(**PIXEL_7, service_workers="allow")
    page = ctx.new_page()
    errors: list[str] = []
    page.on("pageerror", lambda e: errors.append(str(e)))
    page.errors = errors
    yield page
    ctx.close()


def shot(page, name: str) -> Path:
    ARTIFACTS.mkdir(parents=True, exist_ok=True)
    path = ARTIFACTS / f"{name}{'-real' if REAL else ''}.png"
    page.screenshot(path=str(path))
    return path


def open_app(page, url: str) -> None:
    page.goto(url + "/")                       # / redirects to /app/
    assert page.url.endswith("/app/")
    page.wait_for_selector("#conn.ok", timeout=20_000)


def set_max_tokens(page, n: int) -> None:
    page.tap("#tab-settings")
    page.fill("#set-max", str(n))
    page.tap("#tab-chat")


def ask(page, prompt: str = PROMPT) -> None:
    page.tap("#prompt")
    page.fill("#prompt", prompt)
    page.tap("#send")


# ------------------------------------------------------------------- tests
def sse(pieces: list[str], final: dict, finish: str = "stop", drafter_version: str = "v3", **ext) -> str:
    """A chat completion streamed as the server streams it: ``pieces`` (from_draft alternating), then the final
    chunk with ``final`` as its stats and ``ext`` beside them (for answers crafted through Playwright's routing)."""
    def chunk(delta, ext=None, fin=None):
        c = {"id": "x", "object": "chat.completion.chunk", "created": 0, "model": "m",
             "choices": [{"index": 0, "delta": delta, "finish_reason": fin}]}
        if ext is not None:
            c["omnidraft"] = ext
        return f"data: {json.dumps(c)}\n\n"
    body = [chunk({"role": "assistant", "content": ""})]
    body += [chunk({"content": p}, {"from_draft": i % 2 == 1}) for i, p in enumerate(pieces)]
    body += [chunk({}, {"stats": final, "drafter_version": drafter_version, **ext}, finish), "data: [DONE]\n\n"]
    return "".join(body)


def test_chat_streams_highlights_and_updates_figures(phone, server):
    url, fake = server
    open_app(phone, url)
    set_max_tokens(phone, 48)
    assert phone.text_content("#fig-tps") == "–"
    ask(phone)
    answer = phone.locator(".msg.assistant").last
    # streaming: text is visible while the answer is still being generated
    phone.wait_for_function("""() => { const m = document.querySelector('.msg.assistant');
        return m && m.getAttribute('aria-busy') === 'true' && m.textContent.length > 0; }""", timeout=60_000)
    partial = answer.text_content()
    assert phone.is_visible("#stop") and not phone.is_visible("#send")
    shot(phone, "01-chat-streaming")
    phone.wait_for_selector(".msg.assistant[aria-busy=false]", timeout=120_000)
    final = answer.locator(".md").text_content()  # rendered from Markdown (tests/test_app_render.py)
    assert len(final) > len(partial) > 0
    assert answer.locator("mark.draft").count() > 0, "no text highlighted as accepted from drafts"
    tps, acc, tau, ver = (phone.text_content(f"#fig-{k}") for k in ("tps", "acc", "tau", "ver"))
    # tokens per pass: "≥" when the counts only give a lower bound (js/figures.js); never below 1
    assert float(tps) > 0 and (acc.endswith("%") or acc == "not drafting") and float(tau.lstrip("≥")) >= 1
    assert ver not in ("", "–")
    assert not answer.evaluate("e => e.classList.contains('error')")
    assert phone.is_visible("#send") and not phone.is_visible("#stop")
    if fake:
        canned = "".join(t for t, _ in __import__("fake_omnidraft_server").CANNED)
        assert answer.locator(".md pre code").text_content() == canned.split("```python\n")[1].split("```")[0]
        assert answer.locator(".md p").all_text_contents() == ["Here is a simple prime checker:",
                                                                "It tries every divisor up to the square root."]
        drafted = "".join(answer.locator("mark.draft").all_text_contents())
        assert "def is_prime" in drafted and " prime" not in drafted.split("def")[0]
        assert (tps, acc, tau, ver) == ("18.0", "55%", "2.06", "v0")   # 64 tokens in 31 passes
    shot(phone, "02-chat-done")
    assert phone.errors == []


def test_settings_are_sent_with_the_request(phone, server):
    url, fake = server
    if fake is None:
        pytest.skip("inspects the requests the fake server received")
    fake.config["API_KEY"] = "sekret"
    try:
        phone.goto(url + "/app/")
        phone.wait_for_selector("#conn.down")
        assert "API key" in phone.text_content("#conn-text")
        phone.tap("#tab-settings")
        phone.fill("#set-key", "sekret")
        phone.wait_for_selector("#conn.ok")
        help_text = phone.text_content("#set-model-help")
        assert "one model pair" in help_text and phone.is_disabled("#set-model")
        phone.select_option("#set-method", "slem")
        phone.tap("#set-adaptive")                      # adaptive off -> policy fixed
        phone.fill("#set-k", "3")
        phone.fill("#set-temp", "0.7")
        phone.fill("#set-max", "64")
        shot(phone, "03-settings")
        phone.tap("#tab-chat")
        ask(phone, "hello")
        phone.wait_for_selector(".msg.assistant[aria-busy=false]")
        req = fake.config["REQUESTS"][-1]
        body = req["body"]
        assert req["auth"] == "Bearer sekret"
        assert body["stream"] is True and body["model"] == "qwen2.5-coder-0.5b+smollm2-135m"
        assert body["messages"] == [{"role": "user", "content": "hello"}]
        assert body["omnidraft"] == {"method": "slem", "k": 3, "policy": "fixed"}
        assert body["temperature"] == 0.7 and body["max_tokens"] == 64 and isinstance(body["seed"], int)
        # settings survive a reload (localStorage)
        phone.reload()
        phone.tap("#tab-settings")
        assert phone.input_value("#set-method") == "slem" and phone.input_value("#set-k") == "3"
        assert phone.is_checked("#set-adaptive") is False
    finally:
        fake.config["API_KEY"] = None


def test_saved_settings_follow_a_new_default_unless_the_user_chose(phone, server):
    """Phones that saved settings before the default method became hybrid stored every field, the old default
    ("omnidraft") included: that one was no choice and now follows the default; what the user changed (k = 3)
    stays.  Settings saved now keep only the user's changes."""
    url, fake = server
    old = {"url": "", "apiKey": "", "model": "", "method": "omnidraft", "temperature": 0, "k": 3,
           "adaptive": True, "maxTokens": 256}
    phone.goto(url + "/app/")
    phone.evaluate("s => localStorage.setItem('omnidraft.settings.v1', s)", json.dumps(old))
    phone.reload()
    phone.tap("#tab-settings")
    assert phone.input_value("#set-method") == "hybrid" and phone.input_value("#set-k") == "3"
    phone.select_option("#set-method", "slem")
    phone.fill("#set-max", "64")
    phone.tap("#tab-chat")
    stored = phone.evaluate("() => [localStorage.getItem('omnidraft.settings.v2'), "
                            "localStorage.getItem('omnidraft.settings.v1')]")
    kept = json.loads(stored[0])
    kept.pop("model", None)  # filled in from the server's /v1/models once connected
    assert kept == {"method": "slem", "k": 3, "maxTokens": 64} and stored[1] is None
    if fake is not None:
        ask(phone, "hello")
        phone.wait_for_selector(".msg.assistant[aria-busy=false]")
        body = fake.config["REQUESTS"][-1]["body"]
        assert body["omnidraft"] == {"method": "slem", "k": 3, "policy": "cost"} and body["max_tokens"] == 64
    assert not phone.errors


def test_learning_view_plots_history(phone, server):
    url, _ = server
    open_app(phone, url)
    set_max_tokens(phone, 24)
    for _ in range(2):                                   # at least two points on the chart
        ask(phone, "Write a prime checker")
        phone.wait_for_function("""n => document.querySelectorAll('.msg.assistant[aria-busy=false]').length >= n""",
                                arg=phone.locator(".msg.assistant").count(), timeout=120_000)
    with urllib.request.urlopen(url + "/v1/omnidraft/stats") as r:
        n = len(json.load(r)["history"])
    phone.tap("#tab-learn")
    phone.wait_for_function("n => document.querySelectorAll('#chart-acc circle.pt').length === n", arg=n)
    assert n >= 2
    assert phone.locator("#chart-tps circle.pt").count() == n
    assert phone.locator("#chart-acc path.series").count() == 1
    assert f"{n} answers" in phone.get_attribute("#chart-acc", "aria-label")
    assert phone.locator("#totals dt").count() > 0
    shot(phone, "04-learning")
    assert phone.errors == []


@pytest.mark.parametrize("width,scheme", [(390, "light"), (412, "light"), (390, "dark"), (412, "dark")])
def test_phone_layout_and_accessibility(browser, server, width, scheme):
    url, _ = server
    ctx = browser.new_context(**{**PIXEL_7, "viewport": {"width": width, "height": 844}}, color_scheme=scheme)
    page = ctx.new_page()
    try:
        open_app(page, url)
        for tab in ("chat", "learn", "settings"):
            page.tap(f"#tab-{tab}")
            report = page.evaluate(A11Y_AUDIT)
            assert report["overflow"] <= 0, f"{tab}: page wider than the screen by {report['overflow']} px"
            assert report["unlabelled"] == [], f"{tab}: controls without an accessible name"
            assert report["small"] == [], f"{tab}: touch targets under 44 px"
            assert report["lowContrast"] == [], f"{tab}: text below 4.5:1 contrast"
        # the composer and the tab bar sit in the thumb zone (bottom quarter of the screen)
        page.tap("#tab-chat")
        box = page.locator("#send").bounding_box()
        assert box["y"] > 0.75 * 844
        if scheme == "dark" and width == 412:
            shot(page, "06-dark")
    finally:
        ctx.close()


def test_sse_parser_edge_cases(phone, server):
    url, _ = server
    phone.goto(url + "/app/")
    got = phone.evaluate("""async () => {
        const { SSEParser } = await import('./js/sse.js');
        const p = new SSEParser(), out = [];
        for (const piece of ['data: {"a"', ':1}\\r', '\\n\\r\\n: comment\\n\\ndata:x\\ndata: y\\n', '\\n', 'data: [DONE]'])
            out.push(...p.push(piece));
        out.push(...p.end());
        return out;
    }""")
    assert got == ['{"a":1}', "x\ny", "[DONE]"]


def test_manifest_and_offline_shell(browser, tmp_path):
    """Installable (manifest + icons + service worker), and the shell loads with the server gone."""
    ctx = browser.new_context(**PIXEL_7, service_workers="allow")
    page = ctx.new_page()
    try:
        with ServerThread(create_app(delay=0)) as s:
            page.goto(s.url + "/app/")
            manifest = page.evaluate("""async () => {
                const href = document.querySelector('link[rel=manifest]').href;
                return (await fetch(href)).json(); }""")
            assert manifest["display"] == "standalone" and manifest["start_url"] == "/app/"
            sizes = {i["sizes"] for i in manifest["icons"]}
            assert {"192x192", "512x512"} <= sizes
            assert any(i.get("purpose") == "maskable" for i in manifest["icons"])
            scope = page.evaluate("async () => (await navigator.serviceWorker.ready).scope")
            assert scope == s.url + "/app/"
            page.wait_for_function("async () => (await caches.keys()).length > 0 && "
                                   "(await (await caches.open((await caches.keys())[0])).keys()).length >= 9")
        page.reload()                                    # server is down now
        page.wait_for_selector("#conn.down", timeout=20_000)
        assert page.is_visible("#composer") and page.is_visible(".tabs")
        assert "unreachable" in page.text_content("#conn-text")
        shot(page, "05-offline-shell")
    finally:
        ctx.close()


# Runs in the page: overflow, accessible names, touch target sizes, text contrast (WCAG formula).
A11Y_AUDIT = """() => {
  const visible = e => { const r = e.getBoundingClientRect(); return r.width > 0 && r.height > 0 &&
                         getComputedStyle(e).visibility !== 'hidden'; };
  const name = e => (e.getAttribute('aria-label') || (e.labels && [...e.labels].map(l => l.textContent).join(' '))
                     || e.getAttribute('aria-labelledby') || (e.tagName === 'BUTTON' && e.textContent) || '').trim();
  const controls = [...document.querySelectorAll('button, input, select, textarea')].filter(visible);
  const unlabelled = controls.filter(e => !name(e)).map(e => e.id || e.outerHTML.slice(0, 60));
  const small = [...document.querySelectorAll('button, select, input:not([type=checkbox]):not([type=range]), textarea')]
      .filter(visible).filter(e => { const r = e.getBoundingClientRect(); return r.height < 44 || r.width < 44; })
      .map(e => e.id);
  const rgb = s => s.match(/[\\d.]+/g).map(Number);
  const lum = ([r, g, b]) => { const f = c => { c /= 255; return c <= 0.03928 ? c / 12.92 : ((c + 0.055) / 1.055) ** 2.4; };
                               return 0.2126 * f(r) + 0.7152 * f(g) + 0.0722 * f(b); };
  const bgOf = e => { for (; e; e = e.parentElement) { const c = rgb(getComputedStyle(e).backgroundColor);
                        if (c.length < 4 || c[3] > 0) return c.slice(0, 3); } return [255, 255, 255]; };
  const lowContrast = [];
  for (const e of document.querySelectorAll('h1, h2, p, dt, dd, label, mark, span, small, button, .msg, option'))
  {
    if (!visible(e) || !e.textContent.trim()) continue;
    const st = getComputedStyle(e);
    if (parseFloat(st.opacity) < 1) continue;
    const a = lum(rgb(st.color)), b = lum(bgOf(e));
    const ratio = (Math.max(a, b) + 0.05) / (Math.min(a, b) + 0.05);
    if (ratio < 4.5) lowContrast.push(`${e.tagName}#${e.id}.${e.className}: ${ratio.toFixed(2)}`);
  }
  return { overflow: document.documentElement.scrollWidth - innerWidth, unlabelled, small, lowContrast };
}"""
