// UI wiring: tabs, chat with streaming, live figures, learning chart, settings.
import { Api } from "./api.js";
import { lineChart } from "./chart.js";
import { TAU_BOUND_NOTE, acceptance, tauText, tokensPerPass } from "./figures.js";
import { renderMarkdown } from "./markdown.js";
import { loadSettings, requestOptions, saveSettings } from "./settings.js";

const $ = (id) => document.getElementById(id);
let settings = loadSettings();
const api = new Api(() => settings);
const history = [];          // the conversation sent to the server: [{role, content}]
let running = null;          // AbortController of the generation in flight
let serverModels = [];

// ------------------------------------------------------------------ tabs
const TABS = ["chat", "learn", "settings"];
function showTab(name, focus = false) {
  for (const t of TABS) {
    const on = t === name;
    $(`tab-${t}`).setAttribute("aria-selected", String(on));
    $(`tab-${t}`).tabIndex = on ? 0 : -1;
    $(`view-${t}`).hidden = !on;
  }
  if (focus) $(`tab-${name}`).focus();
  if (name === "learn") refreshLearning();
}
for (const t of TABS) {
  $(`tab-${t}`).addEventListener("click", () => showTab(t));
  $(`tab-${t}`).addEventListener("keydown", (e) => {
    const step = { ArrowRight: 1, ArrowLeft: -1 }[e.key];
    if (step) showTab(TABS[(TABS.indexOf(t) + step + TABS.length) % TABS.length], true);
  });
}

// ------------------------------------------------------------ connection
function setConn(state, text) {
  $("conn").className = `conn ${state}`;
  $("conn-text").textContent = text;
}

async function connect() {
  setConn("", "connecting…");
  try {
    await api.health();
    const m = await api.models();
    serverModels = (m.data || []).map((d) => d.id);
    fillModels();
    setConn("ok", "connected");
    return true;
  } catch (e) {
    setConn("down", e.status === 401 ? "API key needed" : "server unreachable");
    return false;
  }
}

function fillModels() {
  const sel = $("set-model");
  sel.replaceChildren(...serverModels.map((id) => new Option(id, id, false, id === settings.model)));
  const one = serverModels.length === 1;
  sel.disabled = serverModels.length < 2;
  $("set-model-help").textContent = serverModels.length === 0 ? "No models reported by the server."
    : one ? `This server runs one model pair: ${serverModels[0]}. Start it with other --target/--draft to change.`
    : `${serverModels.length} model pairs on this server.`;
  if (!serverModels.includes(settings.model)) settings.model = serverModels[0] || "";
}

// ------------------------------------------------------------------ chat
const fmt = {
  tps: (s) => (s.tokens_per_s ?? 0).toFixed(1),
  acc: (s) => acceptance(s),           // {short, long}: "not drafting: why" when nothing was drafted
  tau: (s) => tauText(s),              // tokens per pass that emitted them (js/figures.js)
};

/** f: {id: text or [text, title]}; a title says more than fits in the bar (or is removed). */
function setFigures(f, live) {
  for (const [id, v] of Object.entries(f)) {
    const [text, title] = Array.isArray(v) ? v : [v, ""];
    const dd = $(`fig-${id}`);
    dd.textContent = text;
    if (title) dd.title = title; else dd.removeAttribute("title");
    dd.classList.toggle("live", live);
    dd.classList.toggle("words", /[a-z]{3}/.test(text));   // words, not a number: smaller type to fit
  }
}

/** The figures bar for an answer's final stats. */
function finalFigures(s) {
  const acc = fmt.acc(s), tau = tokensPerPass(s);
  return { tps: fmt.tps(s), acc: [acc.short, acc.long],
           tau: [fmt.tau(s), tau && !tau.exact ? TAU_BOUND_NOTE : ""] };
}

/** A block under an answer's text: the token-limit cut, a failure. */
function notice(kind, text) {
  const p = document.createElement("p");
  p.className = `notice ${kind}`;
  p.textContent = text;
  return p;
}

function bubble(role, text = "") {
  $("empty-chat")?.remove();
  const div = document.createElement("div");
  div.className = `msg ${role}`;
  div.setAttribute("aria-label", role === "user" ? "You said" : "Answer");
  if (text) div.textContent = text;
  $("messages").append(div);
  div.scrollIntoView({ block: "end" });
  return div;
}

/** Collects streamed text with its origin per character and renders it as Markdown (once per frame while
 *  streaming, then once more when done); text accepted from drafts stays highlighted (markdown.js). */
class StreamWriter {
  constructor(box) {
    this.view = document.createElement("div");
    this.view.className = "md";
    box.append(this.view);
    this.text = ""; this.fromDraft = []; this.draftChars = 0; this.frame = 0;
  }
  write(text, fromDraft) {
    this.text += text;
    for (let i = 0; i < text.length; i++) this.fromDraft.push(fromDraft ? 1 : 0);
    if (fromDraft) this.draftChars += text.length;
    this.frame ||= requestAnimationFrame(() => this.flush());
  }
  flush() {
    cancelAnimationFrame(this.frame);
    this.frame = 0;
    this.view.replaceChildren(renderMarkdown(this.text, this.fromDraft));
  }
}

/** "drafted 60 and accepted 33 of 48 tokens: <why the policy drafted or not>", from the final stats. */
function draftSummary(s) {
  if (typeof s.proposed !== "number" || typeof s.accepted !== "number") return "";
  const why = s.policy_note ? `: ${s.policy_note}` : "";
  return `drafted ${s.proposed} and accepted ${s.accepted} of ${s.completion_tokens ?? "?"} tokens${why}`;
}

async function send(prompt) {
  history.push({ role: "user", content: prompt });
  bubble("user", prompt);
  const box = bubble("assistant");
  box.setAttribute("aria-busy", "true");
  const w = new StreamWriter(box);
  const started = performance.now();
  let chunks = 0;
  running = new AbortController();
  $("send").hidden = true; $("stop").hidden = false;
  setFigures({ tps: "…", acc: "…", tau: "…" }, true);
  try {
    const body = { ...requestOptions(settings), messages: history };
    const model = settings.model || serverModels[0];
    if (model) body.model = model;     // else the server's default pair
    const res = await api.chat(body, (text, fromDraft) => {
      w.write(text, fromDraft);
      chunks++;
      const secs = (performance.now() - started) / 1000;
      // live estimates until the final chunk brings the server's figures
      setFigures({ tps: `~${(chunks / Math.max(secs, 0.05)).toFixed(1)}`,
                   acc: `~${Math.round((100 * w.draftChars) / w.text.length)}%` }, true);
      box.scrollIntoView({ block: "end" });
    }, running.signal);
    w.flush();
    history.push({ role: "assistant", content: w.text });
    if (res.finishReason === "length") {     // the answer stops mid-sentence: say why
      box.append(notice("cut", res.timedOut
        ? "cut at the server's time limit: the answer took longer than the server allows a request"
        : `cut at the token limit (${body.max_tokens ?? "max"} tokens): `
          + "raise Max tokens in Settings for a longer answer"));
    }
    if (res.stats) {
      const s = res.stats;
      setFigures(finalFigures(s), false);
      const meta = document.createElement("small");
      meta.className = "meta";
      meta.textContent = `${s.completion_tokens ?? "?"} tokens · ${fmt.tps(s)} tok/s · ${fmt.acc(s).long} · `
        + `${fmt.tau(s)} tok/pass${s.method ? " · " + s.method : ""}`;
      const why = document.createElement("small");
      why.className = "meta why";
      why.textContent = draftSummary(s);
      box.append(meta, ...(why.textContent ? [why] : []));
    }
    if (res.drafterVersion) setFigures({ ver: res.drafterVersion }, false);
    if (!$("view-learn").hidden) refreshLearning();
  } catch (e) {
    w.flush();
    history.pop();
    box.classList.add("error");
    if (e.name === "AbortError") {
      box.append(document.createTextNode(" [stopped]"));
    } else {
      // Unreachable names the server in words; other failures say what the server or the stream said
      box.append(notice("failed", e.name === "Unreachable" ? e.message : `error: ${e.message}`));
      if (!$("prompt").value) {                  // the prompt is kept, ready to send again
        $("prompt").value = prompt;
        autosize();
      }
      connect();
    }
    setFigures({ tps: "–", acc: "–", tau: "–" }, false);
  } finally {
    box.setAttribute("aria-busy", "false");
    running = null;
    $("send").hidden = false; $("stop").hidden = true;
    box.scrollIntoView({ block: "end" });      // what was added under the answer is on screen too
  }
}

$("composer").addEventListener("submit", (e) => {
  e.preventDefault();
  const prompt = $("prompt").value.trim();
  if (!prompt || running) return;
  $("prompt").value = "";
  autosize();
  send(prompt);
});
$("prompt").addEventListener("keydown", (e) => {
  if (e.key === "Enter" && !e.shiftKey && !e.isComposing && !matchMedia("(pointer: coarse)").matches) {
    e.preventDefault();
    $("composer").requestSubmit();
  }
});
function autosize() {
  const t = $("prompt");
  t.style.height = "auto";
  t.style.height = `${t.scrollHeight + 2}px`;
}
$("prompt").addEventListener("input", autosize);
$("stop").addEventListener("click", () => running?.abort());

// -------------------------------------------------------------- learning
const TOTALS = [   // [key, label, format]: shown when the server reports them
  ["generations", "answers", String], ["requests", "requests", String],
  ["completion_tokens", "tokens generated", String],
  ["acceptance_rate", "acceptance", (_, t) => rateText(t)],
  // the server's total divides by every pass, those that only produced the end-of-text token too
  ["tau", "tokens / target pass", (v) => v.toFixed(2)],
  ["tokens_per_s", "average tok/s", (v) => v.toFixed(1)],
];

// A rate comes with its counts; below min_drafted drafted tokens it is noise and not shown as a rate.
const MIN_DRAFTED = 50;
const measured = (r, min) => typeof r.proposed === "number" && r.proposed >= min;
function rateText(r, min = r.min_drafted ?? MIN_DRAFTED) {
  if (typeof r.proposed !== "number") return "not measured (no counts)";
  const counts = `${r.accepted}/${r.proposed} drafted`;
  return measured(r, min) ? `${(100 * r.accepted / r.proposed).toFixed(1)}% (${counts})`
    : `not measured (${counts}, < ${min})`;
}

async function refreshLearning() {
  try {
    const st = await api.stats();
    const h = (st.history || []).map((r) => ({ ...r, t: r.t ?? r.time ?? 0 })).sort((a, b) => a.t - b.t);
    const pair = st.draft && st.target ? `${st.draft} drafting for ${st.target}; ` : "";
    $("learn-pair").textContent = `${pair}drafter version ${st.drafter_version || "?"}; `
      + `${h.length} answer${h.length === 1 ? "" : "s"} so far.`;
    const pts = (key, rows = h) => rows.map((r) => ({ t: r.t, y: r[key] ?? 0, version: r.drafter_version }));
    const min = st.totals?.min_drafted ?? MIN_DRAFTED;
    const accRows = h.filter((r) => measured(r, min));   // answers that drafted too little are not plotted
    $("chart-acc").replaceChildren(lineChart(pts("acceptance_rate", accRows),
      { title: `Acceptance (answers with ≥ ${min} drafted)`, yMax: 1, format: (v) => `${Math.round(v * 100)}%` }));
    $("chart-tps").replaceChildren(lineChart(pts("tokens_per_s"),
      { title: "Speed (tok/s)", format: (v) => v.toFixed(1) }));
    const last = h[h.length - 1], lastAcc = accRows[accRows.length - 1], few = h.length - accRows.length;
    $("chart-acc").setAttribute("aria-label", `Acceptance rate over ${accRows.length} of ${h.length} answers`
      + (few ? ` (${few} drafted fewer than ${min} tokens: not plotted)` : "")
      + (lastAcc ? `, last ${rateText(lastAcc, min)}` : ""));
    $("chart-tps").setAttribute("aria-label", `Tokens per second over ${h.length} answers`
      + (last ? `, last ${(last.tokens_per_s ?? 0).toFixed(1)}` : ""));
    showHeldout(st.heldout || [], min);
    const totals = st.totals || {};
    $("totals").replaceChildren(...TOTALS.filter(([k]) => typeof totals[k] === "number").flatMap(([k, label, f]) => {
      const dt = document.createElement("dt"); dt.textContent = label;
      const dd = document.createElement("dd"); dd.textContent = f(totals[k], totals);
      return [dt, dd];
    }));
  } catch (e) {
    $("learn-pair").textContent = `Could not load statistics: ${e.message}`;
  }
}
$("learn-refresh").addEventListener("click", refreshLearning);
// While the tab is open it follows the server: the held-out curve grows as `omnidraft adapt` measures new
// versions, with no answers in this app to trigger a refresh.
const LEARN_POLL_MS = 15_000;
setInterval(() => { if (!$("view-learn").hidden && !document.hidden) refreshLearning(); }, LEARN_POLL_MS);

// The held-out curve: what `omnidraft adapt` measured on prompts never streamed, after each update (kind
// "curve", the base drafter at 0 prompts), beside its control (the untrained drafter re-exported the same way)
// and the old domains before and after ("old").  Points with too few drafted tokens are not plotted.
const pct = (r) => `${(100 * r.accepted / r.proposed).toFixed(1)}%`;
function showHeldout(points, min) {
  const curve = points.filter((p) => p.kind === "curve"), shown = curve.filter((p) => measured(p, min));
  const control = points.find((p) => p.kind === "control" && measured(p, min));
  $("heldout").hidden = !curve.length;
  if (!curve.length) return;
  const last = shown[shown.length - 1];
  $("chart-heldout").replaceChildren(lineChart(shown.map((p) => ({ t: p.prompts, y: p.accepted / p.proposed })), {
    // the axis from 0 to just above the highest point or the control: a few points' gain stays visible
    title: `Held-out acceptance: ${curve[0].set || "new domain"}`, versions: false,
    format: (v) => `${Math.round(v * 100)}%`, xText: (n) => `${n} prompts`,
    last: last ? `after ${last.prompts} prompts: ${pct(last)}, tau ${last.tau.toFixed(2)}` : undefined,
    reference: control ? { y: control.accepted / control.proposed, label: `control ${pct(control)}` } : undefined,
  }));
  $("chart-heldout").setAttribute("aria-label", `Held-out acceptance over ${curve.length} measurements`
    + (last ? `, after ${last.prompts} prompts ${rateText(last, min)}, tau ${last.tau.toFixed(2)}` : "")
    + (control ? `; control ${rateText(control, min)}, tau ${control.tau.toFixed(2)}` : ""));
  const old = points.filter((p) => p.kind === "old");
  const bySet = [...new Set(old.map((p) => p.set))].map((set) => {
    const [before, after] = [old.find((p) => p.set === set), old.filter((p) => p.set === set).pop()];
    return before === after ? `${set} ${rateText(before, min)}`
      : `${set} ${rateText(before, min)} → ${rateText(after, min)}`;
  });
  $("heldout-note").textContent = bySet.length ? `Old domains (before → after): ${bySet.join("; ")}.` : "";
}

// -------------------------------------------------------------- settings
function showSettings() {
  $("set-url").value = settings.url;
  $("set-key").value = settings.apiKey;
  $("set-method").value = settings.method;
  $("set-temp").value = settings.temperature;
  $("set-temp-out").value = settings.temperature;
  $("set-adaptive").checked = settings.adaptive;
  $("set-k").value = settings.k;
  $("set-k-out").value = settings.k;
  $("set-max").value = settings.maxTokens;
}

function readSettings() {
  const before = settings.url + "\n" + settings.apiKey;
  settings = {
    ...settings,
    url: $("set-url").value.trim(),
    apiKey: $("set-key").value,
    model: $("set-model").value || settings.model,
    method: $("set-method").value,
    temperature: Number($("set-temp").value),
    adaptive: $("set-adaptive").checked,
    k: Number($("set-k").value),
    maxTokens: Math.max(1, Math.min(4096, Number($("set-max").value) || 256)),
  };
  $("set-temp-out").value = settings.temperature;
  $("set-k-out").value = settings.k;
  saveSettings(settings);
  $("set-saved").textContent = "Saved.";
  if (before !== settings.url + "\n" + settings.apiKey) connect();
}
$("settings").addEventListener("input", readSettings);
$("settings").addEventListener("change", readSettings);
$("settings").addEventListener("submit", (e) => e.preventDefault());
$("set-test").addEventListener("click", async () => {
  const out = $("set-test-result");
  out.className = "help";
  out.textContent = "Testing…";
  const ok = await connect();
  out.textContent = ok ? `OK: ${serverModels.length} model pair(s).` : `Failed: ${$("conn-text").textContent}.`;
  out.classList.toggle("bad", !ok);
});

// ------------------------------------------------------------------ start
showSettings();
connect();
if ("serviceWorker" in navigator) {
  navigator.serviceWorker.register("sw.js").catch((e) => console.warn("service worker:", e));
}
