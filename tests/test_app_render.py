"""Answers in the phone app are rendered from Markdown, safely (headless Chromium, Pixel 7 emulation).

Code fences become code blocks with a copy button, text accepted from drafts stays highlighted, the summary
line says what was drafted and why, and HTML in a model's output never runs: the fake server's canned answer,
then crafted model output answered through Playwright's routing.  Same requirements as test_android_app.py.
"""

from __future__ import annotations

import json

import pytest

from fake_omnidraft_server import CANNED, canned_stats
from test_android_app import (A11Y_AUDIT, ask, browser, open_app, phone, server, set_max_tokens,  # noqa: F401
                              shot, sse)

CODE = "".join(t for t, _ in CANNED).split("```python\n")[1].split("```")[0]

# Model output that tries to run script, piece by piece as it would stream (from_draft flags alternate).
HOSTILE = ["Look: <script>window.__pwned = 'script'</script> and ",
           "<img src=x onerror=\"window.__pwned = 'img'\"> then ",
           "[a link](javascript:window.__pwned='link') and ![pic](http://127.0.0.1:9/x.png)\n\n",
           "<div onclick=\"window.__pwned = 'div'\">**bold**</div>\n\n",
           "```html\n<script>window.__pwned = 'code'</script>\n```\n", "Done."]


def _sse(pieces: list[str]) -> str:
    stats = {"completion_tokens": 60, "proposed": 0, "accepted": 0, "acceptance_rate": 0, "tau": 1.0,
             "tokens_per_s": 9.5, "method": "omnidraft",
             "policy_note": "the cost policy ran the target alone, it is faster on this machine "
                            "(predicted 0.90x at best, even with every drafted token accepted)"}
    return sse(pieces, stats, drafter_version="v0")


def test_code_fence_renders_as_a_code_block_with_copy_and_draft_highlights(phone, server):
    url, fake = server
    if fake is None:
        pytest.skip("checks the fake server's canned answer")
    phone.context.grant_permissions(["clipboard-read", "clipboard-write"], origin=url)
    open_app(phone, url)
    set_max_tokens(phone, 48)
    ask(phone)
    phone.wait_for_selector(".msg.assistant[aria-busy=false]", timeout=60_000)
    answer = phone.locator(".msg.assistant").last
    code = answer.locator(".md .codeblock pre > code.language-python")
    assert code.count() == 1 and code.text_content() == CODE
    assert "def is_prime" in "".join(code.locator("mark.draft").all_text_contents())
    assert "Here is a simple prime checker:" in answer.locator(".md p").first.text_content()
    assert "```" not in answer.locator(".md").text_content()
    # provenance: " prime" came from the target, " is a simple" and " checker" from accepted drafts
    first = answer.locator(".md p").first
    assert first.locator("mark.draft").all_text_contents()[:2] == [" is a simple", " checker:"]
    s = canned_stats(0, "omnidraft")              # the first answer of this module's fake server
    assert answer.locator(".meta.why").text_content() == (
        f"drafted {s['proposed']} and accepted {s['accepted']} of {s['completion_tokens']} tokens: "
        f"{s['policy_note']}")
    copy = answer.locator(".codeblock button.copy")
    assert copy.is_visible() and copy.get_attribute("aria-label") == "Copy python code"
    copy.tap()
    phone.wait_for_function("() => document.querySelector('.codeblock button.copy').textContent === 'Copied'")
    assert phone.evaluate("navigator.clipboard.readText()") == CODE
    report = phone.evaluate(A11Y_AUDIT)        # the rendered answer keeps the app's layout and contrast rules
    assert report["overflow"] <= 0 and report["unlabelled"] == [] and report["small"] == []
    assert report["lowContrast"] == []
    answer.locator(".codeblock").scroll_into_view_if_needed()
    shot(phone, "07-chat-code-block")
    assert phone.errors == []


def test_html_in_model_output_never_runs(phone, server):
    url, _ = server
    phone.route("**/v1/chat/completions", lambda route: route.fulfill(
        status=200, headers={"Content-Type": "text/event-stream"}, body=_sse(HOSTILE)))
    dialogs: list[str] = []
    phone.on("dialog", lambda d: (dialogs.append(d.message), d.dismiss()))
    open_app(phone, url)
    ask(phone, "show me some html")
    phone.wait_for_selector(".msg.assistant[aria-busy=false]", timeout=30_000)
    phone.wait_for_timeout(300)                   # an onerror handler would have fired by now
    assert phone.evaluate("window.__pwned") is None and dialogs == []
    md = phone.locator(".msg.assistant .md").last
    assert md.locator("script, img, iframe, [onerror], [onclick]").count() == 0
    text = md.text_content()
    # the model's HTML is shown as the text it is, and the Markdown around it still renders
    assert "<script>window.__pwned = 'script'</script>" in text and "<img src=x onerror=" in text
    assert "**bold**" in text                     # inside an HTML block Markdown is not interpreted: literal
    assert md.locator("pre > code.language-html").text_content() == "<script>window.__pwned = 'code'</script>\n"
    hrefs = md.locator("a").evaluate_all("as => as.map(a => a.getAttribute('href'))")
    assert not any(h and h.lower().startswith("javascript:") for h in hrefs)
    assert md.locator("mark.draft").count() > 0   # highlights survive escaping
    assert phone.text_content(".msg.assistant .meta.why").startswith(
        "drafted 0 and accepted 0 of 60 tokens: the cost policy ran the target alone")
    shot(phone, "08-chat-model-html")
    assert phone.errors == []


def _point(kind: str, set_name: str, prompts: int, version: str, accepted: int, proposed: int, tau: float) -> dict:
    return {"kind": kind, "set": set_name, "prompts": prompts, "version": version, "accepted": accepted,
            "proposed": proposed, "acceptance": accepted / proposed, "tau": tau, "measured": proposed >= 50}


# what `omnidraft adapt` wrote into the registry's heldout.json (results/adapt-javascript.json's figures), as the
# server's /v1/omnidraft/stats passes it on; the 32-prompt point drafted too little to be a rate
HELDOUT = [_point("curve", "javascript", 0, "base", 754, 2490, 1.964),
           _point("old", "stdlib-code", 0, "base", 416, 1041, 2.304),
           _point("old", "chat", 0, "base", 333, 1275, 1.957),
           _point("control", "javascript", 0, "control", 758, 2479, 1.974),
           _point("curve", "javascript", 16, "v0002", 776, 2384, 2.021),
           _point("curve", "javascript", 32, "v0004", 10, 40, 1.5),
           _point("curve", "javascript", 64, "v0008", 808, 2271, 2.110),
           _point("old", "stdlib-code", 64, "v0008", 414, 1040, 2.3),
           _point("old", "chat", 64, "v0008", 331, 1282, 1.946)]


def test_learning_tab_draws_the_heldout_curve_beside_its_control(phone, server):
    """Issue 26: the Learning tab shows the held-out curve (measured points only), the control as a dashed line,
    and the old domains before and after; while it is open it follows the server as the curve grows."""
    url, fake = server
    if fake is None:
        pytest.skip("the held-out points are crafted")
    stats = {"history": [], "totals": {}, "drafter_version": "v0002", "target": "t", "draft": "d",
             "heldout": HELDOUT[:5]}                                  # the run so far: 16 prompts
    phone.route("**/v1/omnidraft/stats", lambda route: route.fulfill(
        status=200, headers={"Content-Type": "application/json"}, body=json.dumps(stats)))
    phone.clock.install()
    open_app(phone, url)
    phone.tap("#tab-learn")
    phone.wait_for_selector("#heldout:not([hidden])")
    chart = phone.locator("#chart-heldout")
    assert chart.locator("circle.pt").count() == 2
    stats.update(heldout=HELDOUT, drafter_version="v0008")           # the run goes on; nobody taps anything
    phone.clock.run_for(16_000)
    phone.wait_for_function("() => document.querySelectorAll('#chart-heldout circle.pt').length === 3")
    # 0, 16 and 64 prompts: not the 32-prompt point, which drafted 40 tokens
    assert chart.locator("line.ref").count() == 1
    assert chart.locator(".ref-label").text_content() == "control 30.6%"
    assert "after 64 prompts: 35.6%, tau 2.11" in chart.locator("text.status").text_content()
    label = chart.get_attribute("aria-label")
    assert "after 64 prompts 35.6% (808/2271 drafted), tau 2.11" in label
    assert "control 30.6% (758/2479 drafted), tau 1.97" in label
    assert phone.text_content("#heldout-note") == (
        "Old domains (before → after): stdlib-code 40.0% (416/1041 drafted) → 39.8% (414/1040 drafted); "
        "chat 26.1% (333/1275 drafted) → 25.8% (331/1282 drafted).")
    shot(phone, "05-learning-heldout")
    assert phone.errors == []
