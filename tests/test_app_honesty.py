"""The phone app tells the truth about each answer, and its layout shows it (issue item 9, a hostile probe).

Headless Chromium with Pixel 7 emulation, as tests/test_android_app.py (same requirements): answers are crafted
through Playwright's routing so each case is exact.  The per-answer summary is on screen, not behind the figures
bar; an answer cut at max_tokens says so; nothing drafted reads "not drafting", not "0% accepted"; tokens per
target pass counts the passes that emitted tokens (a stream of N tokens whose last pass produced only the end
token is N tokens in N passes, not N / (N + 1) = 0.98); a stopped server is named in words and the typed prompt
is kept; long code lines wrap; the Learning charts' titles don't overlap their status text.
"""

from __future__ import annotations

import json

import pytest

from fake_omnidraft_server import ServerThread, create_app
from test_android_app import (PIXEL_7, A11Y_AUDIT, ask, browser, open_app, phone, server,  # noqa: F401
                              shot, sse)

GAIN_NOTE = "the cost policy drafted where it predicts a gain (predicted 1.60x at draft length 3)"
ALONE_NOTE = ("the cost policy ran the target alone, it is faster on this machine "
              "(predicted 0.90x at best, even with every drafted token accepted)")


def stats(**kw) -> dict:
    """Final-chunk stats as the server sends them (GenerationStats.as_dict), self-consistent by default:
    64 tokens, 33 of 60 drafted accepted, every one of the 31 passes emitted accepted + 1 tokens."""
    s = {"completion_tokens": 64, "target_passes": 31, "proposed": 60, "accepted": 33, "tokens_per_s": 18.0,
         "method": "omnidraft", "policy_note": GAIN_NOTE, "draft_lengths": [2] * 30 + [0]}
    s.update(kw)
    s.setdefault("acceptance_rate", s["accepted"] / s["proposed"] if s["proposed"] else 0.0)
    s.setdefault("tau", s["completion_tokens"] / s["target_passes"] if s["target_passes"] else 0.0)
    return s


def answer_with(page, pieces: list[str], final: dict, finish: str = "stop", **ext) -> None:
    page.unroute("**/v1/chat/completions")
    page.route("**/v1/chat/completions", lambda route: route.fulfill(
        status=200, headers={"Content-Type": "text/event-stream"}, body=sse(pieces, final, finish, **ext)))


def wait_answer(page, n: int = 1):
    page.wait_for_function("n => document.querySelectorAll('.msg.assistant[aria-busy=false]').length >= n",
                           arg=n, timeout=30_000)
    page.wait_for_timeout(100)                   # a frame for scrolling to settle
    return page.locator(".msg.assistant").last


# Where an element is on screen: inside the conversation's visible area, above the figures bar, and the
# element the user sees at its centre (nothing painted over it).
ON_SCREEN = """e => { const r = e.getBoundingClientRect(), m = document.getElementById('messages').getBoundingClientRect(),
  f = document.getElementById('figures').getBoundingClientRect();
  const hit = document.elementFromPoint(r.left + r.width / 2, r.top + r.height / 2);
  return { top: r.top, bottom: r.bottom, msgTop: m.top, msgBottom: m.bottom, barTop: f.top,
           hit: !!hit && (hit === e || e.contains(hit)) }; }"""


def assert_on_screen(locator) -> None:
    g = locator.evaluate(ON_SCREEN)
    assert g["top"] >= g["msgTop"] - 0.5 and g["bottom"] <= g["msgBottom"] + 0.5, g
    assert g["bottom"] <= g["barTop"] + 0.5 and g["hit"], g


# ------------------------------------------------------------------- tests
def test_summary_of_a_long_answer_is_visible_above_the_figures_bar(phone, server):
    url, _ = server
    long_answer = [f"Paragraph {i}: some words about primes and divisors.\n\n" for i in range(30)]
    answer_with(phone, long_answer, stats())
    open_app(phone, url)
    ask(phone, "a long answer please")
    answer = wait_answer(phone)
    why = answer.locator(".meta.why")
    assert why.text_content() == f"drafted 60 and accepted 33 of 64 tokens: {GAIN_NOTE}"
    assert_on_screen(why)
    assert_on_screen(answer.locator(".meta").first)
    shot(phone, "09-summary-visible")
    assert phone.errors == []


def test_answer_cut_at_max_tokens_says_so(phone, server):
    url, _ = server
    answer_with(phone, ["The sieve of Eratosthenes marks every multi"], stats(completion_tokens=16,
                target_passes=9, accepted=7, proposed=12, draft_lengths=[2] * 6 + [0] * 3), finish="length")
    open_app(phone, url)
    ask(phone, "explain the sieve")
    answer = wait_answer(phone)
    notice = answer.locator(".notice.cut")
    assert notice.count() == 1 and notice.is_visible()
    assert "cut at the token limit" in notice.text_content()
    # after the answer's text, before the figures line, and on screen
    assert notice.evaluate("n => !!(n.parentElement.querySelector('.md').compareDocumentPosition(n) & 4)")
    assert_on_screen(notice)
    report = phone.evaluate(A11Y_AUDIT)
    assert report["lowContrast"] == [] and report["overflow"] <= 0
    shot(phone, "10-cut-at-token-limit")
    # an answer that ended by itself has no such notice
    answer_with(phone, ["A complete answer."], stats())
    ask(phone, "again")
    assert wait_answer(phone, 2).locator(".notice.cut").count() == 0
    # the server's request timeout also ends a stream with "length": then it says the time limit
    answer_with(phone, ["A slow ans"], stats(completion_tokens=3, target_passes=3, accepted=0, proposed=0,
                                            draft_lengths=[0] * 3), finish="length", timed_out=True)
    ask(phone, "slowly")
    cut = wait_answer(phone, 3).locator(".notice.cut")
    assert cut.count() == 1 and "cut at the server's time limit" in cut.text_content()
    assert "token limit" not in cut.text_content()
    assert phone.errors == []


def test_nothing_drafted_says_not_drafting_and_tokens_per_pass_is_not_below_one(phone, server):
    """The probe's 0.98: 49 tokens, target alone, whose 50th pass produced only the end-of-text token."""
    url, _ = server
    alone = stats(completion_tokens=49, target_passes=50, proposed=0, accepted=0, tokens_per_s=11.0,
                  policy_note=ALONE_NOTE, draft_lengths=[0] * 50)
    assert round(alone["tau"], 2) == 0.98          # what the server reports
    answer_with(phone, ["def is_prime(n):\n", "    ...\n"], alone)
    open_app(phone, url)
    ask(phone, "prime checker")
    answer = wait_answer(phone)
    assert phone.text_content("#fig-tau") == "1.00"
    assert phone.text_content("#fig-acc") == "not drafting"
    assert phone.get_attribute("#fig-acc", "title") == "not drafting: target alone is faster here"
    meta = answer.locator(".meta").first.text_content()
    assert "not drafting: target alone is faster here" in meta and "1.00 tok/pass" in meta
    assert "0%" not in meta and "0.98" not in meta
    assert answer.locator(".meta.why").text_content().startswith("drafted 0 and accepted 0 of 49 tokens")
    report = phone.evaluate(A11Y_AUDIT)            # the figures bar still fits and reads
    assert report["overflow"] <= 0 and report["lowContrast"] == []
    shot(phone, "11-not-drafting")
    assert phone.errors == []


def test_figures_module(phone, server):
    """js/figures.js on its own: tokens per pass from the counts, and what "accepted" says."""
    url, _ = server
    phone.goto(url + "/app/")
    got = phone.evaluate("""async () => {
        const { tokensPerPass, tauText, acceptance } = await import('./js/figures.js');
        const tpp = (s) => { const r = tokensPerPass(s); return r && [Number(r.value.toFixed(4)), r.exact]; };
        return {
          alone: tpp({ completion_tokens: 49, target_passes: 50, accepted: 0, draft_lengths: Array(50).fill(0) }),
          aloneNoLengths: tpp({ completion_tokens: 49, target_passes: 50, accepted: 0 }),
          noneCut: tpp({ completion_tokens: 64, target_passes: 31, accepted: 33 }),
          eogUndrafted: tpp({ completion_tokens: 49, target_passes: 20, accepted: 30,
                              draft_lengths: [...Array(19).fill(2), 0] }),
          eogDrafted: tpp({ completion_tokens: 49, target_passes: 20, accepted: 30,
                            draft_lengths: [...Array(19).fill(2), 3] }),
          onlyEnd: tpp({ completion_tokens: 0, target_passes: 1, accepted: 0 }),
          noCounts: tpp({ tau: 1.5 }),
          text: [tauText({ completion_tokens: 49, target_passes: 50, accepted: 0 }),
                 tauText({ completion_tokens: 49, target_passes: 20, accepted: 30 }),
                 tauText({ completion_tokens: 0, target_passes: 1 })],
          acc: [acceptance({ proposed: 60, accepted: 33, acceptance_rate: 0.55 }),
                acceptance({ proposed: 0, accepted: 0, acceptance_rate: 0, policy_note: 'the cost policy ran '
                             + 'the target alone, it is faster on this machine (predicted 0.90x at best)' }),
                acceptance({ proposed: 0, accepted: 0, acceptance_rate: 0, method: 'target',
                             policy_note: 'no drafter, the target ran alone' }),
                acceptance({ proposed: 0, accepted: 0, acceptance_rate: 0, policy_note: 'the fixed policy '
                             + 'drafts up to 4 tokens every step' })],
        };
    }""")
    assert got["alone"] == [1.0, True] and got["aloneNoLengths"] == [1.0, True]   # 49 / 49, not 49 / 50
    assert got["noneCut"] == [round(64 / 31, 4), True]
    assert got["eogUndrafted"] == [round(49 / 19, 4), True]    # the undrafted last pass emitted only the end
    assert got["eogDrafted"] == [round(49 / 20, 4), False]     # can't tell from the counts: a lower bound
    assert got["onlyEnd"] is None and got["noCounts"] == [1.5, True]
    assert got["text"] == ["1.00", "≥2.45", "–"]
    assert got["acc"] == [
        {"short": "55%", "long": "55% accepted"},
        {"short": "not drafting", "long": "not drafting: target alone is faster here"},
        {"short": "not drafting", "long": "not drafting: the target ran alone, as asked"},
        {"short": "not drafting", "long": "not drafting: nothing was drafted this time"}]


def test_stopped_server_is_named_and_the_prompt_is_kept(browser):
    ctx = browser.new_context(**PIXEL_7)
    page = ctx.new_page()
    errors: list[str] = []
    page.on("pageerror", lambda e: errors.append(str(e)))
    try:
        with ServerThread(create_app(delay=0)) as s:
            open_app(page, s.url)
            url = s.url
        prompt = "Write a prime checker in Rust"     # the server is stopped now
        ask(page, prompt)
        answer = wait_answer(page)
        text = answer.text_content()
        assert f"can't reach the omnidraft server at {url}: is it running?" in text
        assert "Failed to fetch" not in text and "[error" not in text
        assert page.input_value("#prompt") == prompt  # ready to send again
        page.wait_for_selector("#conn.down")
        assert_on_screen(answer.locator(".notice"))
        report = page.evaluate(A11Y_AUDIT)
        assert report["lowContrast"] == [] and report["overflow"] <= 0
        shot(page, "12-server-stopped")
        assert errors == []
    finally:
        ctx.close()


def test_long_code_lines_wrap_instead_of_scrolling_sideways(phone, server):
    url, _ = server
    line = "x = [" + ", ".join(f"value_{i}" for i in range(60)) + "]"
    answer_with(phone, ["Here:\n\n", "```python\n", line + "\n", "print(x)\n", "```\n"], stats())
    open_app(phone, url)
    ask(phone, "long line")
    answer = wait_answer(phone)
    pre = answer.locator(".codeblock pre")
    assert pre.locator("code").text_content() == line + "\nprint(x)\n"      # wrapping changes no text
    g = pre.evaluate("""p => ({ sw: p.scrollWidth, cw: p.clientWidth, ws: getComputedStyle(p).whiteSpace,
                              doc: document.documentElement.scrollWidth - innerWidth,
                              msgs: document.getElementById('messages').scrollWidth
                                    - document.getElementById('messages').clientWidth })""")
    assert g["ws"] == "pre-wrap"
    assert g["sw"] <= g["cw"], f"the code block scrolls sideways: {g}"
    assert g["doc"] <= 0 and g["msgs"] <= 0, g
    shot(phone, "13-code-wraps")
    assert phone.errors == []


HISTORY = [{"t": 1_700_000_000 + 60 * i, "completion_tokens": 64, "proposed": 60, "accepted": 33 + 4 * i,
            "acceptance_rate": (33 + 4 * i) / 60, "tokens_per_s": 18.0 + 4.5 * i, "tau": 2.0,
            "method": "omnidraft", "drafter_version": f"v{i // 2}"} for i in range(4)]

# every pair of text elements in each chart whose boxes intersect
OVERLAPS = """() => { const out = [];
  for (const svg of document.querySelectorAll('.chart svg')) {
    const t = [...svg.querySelectorAll('text')].map(e => [e.textContent, e.getBoundingClientRect()]);
    for (let i = 0; i < t.length; i++) for (let j = i + 1; j < t.length; j++) {
      const [a, r] = t[i], [b, q] = t[j];
      if (r.left < q.right && q.left < r.right && r.top < q.bottom && q.top < r.bottom) out.push(`${a} / ${b}`);
    }
  }
  return out; }"""


@pytest.mark.parametrize("width", [360, 412])
@pytest.mark.parametrize("history", [[], HISTORY], ids=["empty", "four-answers"])
def test_learning_chart_titles_do_not_overlap(browser, server, width, history):
    url, _ = server
    ctx = browser.new_context(**{**PIXEL_7, "viewport": {"width": width, "height": 915}})
    page = ctx.new_page()
    body = json.dumps({"history": history, "drafter_version": "v1", "target": "t", "draft": "d",
                       "totals": {"requests": len(history), "completion_tokens": 64 * len(history)}})
    page.route("**/v1/omnidraft/stats", lambda route: route.fulfill(
        status=200, headers={"Content-Type": "application/json"}, body=body))
    try:
        open_app(page, url)
        page.tap("#tab-learn")
        page.wait_for_selector("#chart-tps svg")
        texts = page.locator("#chart-acc svg text").all_text_contents()
        assert texts[0] == "Acceptance (answers with ≥ 50 drafted)"
        assert ("no data yet" in texts) == (not history)
        assert page.evaluate(OVERLAPS) == []
        if width == 360 and not history:
            shot(page, "14-learning-empty")
    finally:
        ctx.close()
