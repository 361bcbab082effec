"""Answers in the phone app are rendered from Markdown, safely (headless Chromium, Pixel 7 emulation).

Code fences become code blocks with a copy button, text accepted from drafts stays highlighted, the summary
line says what was drafted and why, and HTML in a model's output never runs: the fake server's canned answer,
then crafted model output answered through Playwright's routing.  Same requirements as test_android_app.py.
"""

from __future__ import annotations

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
