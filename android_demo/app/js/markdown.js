// Model output -> safe DOM: Markdown rendered by marked, cleaned by DOMPurify (both vendored in ../vendor).
// No HTML from the model reaches the page: raw HTML in the text is shown as text, images become links
// (nothing is fetched), and DOMPurify removes whatever else could run (javascript: links, handlers).
import { Marked } from "../vendor/marked/marked.esm.js";
import DOMPurify from "../vendor/dompurify/purify.es.js";

const escapeHtml = (s) => s.replace(/[&<>"']/g, (c) => `&#${c.charCodeAt(0)};`);
const LOOK_AHEAD = 96;   // source characters of Markdown syntax (fences, link targets) skipped at most

const md = new Marked({
  gfm: true,
  breaks: true,          // a model's single newlines are line breaks, as in the plain-text view
  renderer: {
    html: ({ text, block }) => (block ? `<p class="raw-html">${escapeHtml(text.trim())}</p>` : escapeHtml(text)),
    image: ({ href, text }) => `<a href="${escapeHtml(href || "")}">${escapeHtml(text || href || "image")}</a>`,
  },
});

DOMPurify.addHook("afterSanitizeAttributes", (node) => {
  if (node.tagName === "A") {   // links open outside the app
    node.setAttribute("target", "_blank");
    node.setAttribute("rel", "noopener noreferrer");
  }
});

/** Markdown `text` as a sanitised DocumentFragment; `fromDraft[i]` (1/0 per UTF-16 unit of text) marks
 *  the characters accepted from the drafter, which are wrapped in <mark class="draft">. */
export function renderMarkdown(text, fromDraft) {
  const frag = DOMPurify.sanitize(md.parse(text), { USE_PROFILES: { html: true }, RETURN_DOM_FRAGMENT: true });
  markDrafts(frag, text, fromDraft);
  for (const pre of frag.querySelectorAll("pre")) addCopyButton(pre);
  return frag;
}

/** The rendered text is the source minus Markdown syntax: each rendered character takes the origin of the
 *  next equal source character within LOOK_AHEAD (else of none), so highlights follow the text. */
function markDrafts(root, text, fromDraft) {
  const nodes = [];
  const walk = document.createTreeWalker(root, NodeFilter.SHOW_TEXT);
  while (walk.nextNode()) nodes.push(walk.currentNode);
  let j = 0;
  for (const node of nodes) {
    const s = node.data;
    const flags = new Uint8Array(s.length);
    for (let i = 0; i < s.length; i++) {
      const k = text.slice(j, j + LOOK_AHEAD).indexOf(s[i]);
      if (k >= 0) { flags[i] = fromDraft[j + k] ? 1 : 0; j += k + 1; }
    }
    if (!flags.includes(1)) continue;
    const out = document.createDocumentFragment();
    for (let a = 0, b; a < s.length; a = b) {
      for (b = a + 1; b < s.length && flags[b] === flags[a]; b++);
      if (flags[a] && s.slice(a, b).trim()) {   // not bare whitespace between blocks
        const m = document.createElement("mark");
        m.className = "draft";
        m.title = "accepted from the drafter";
        m.textContent = s.slice(a, b);
        out.append(m);
      } else {
        out.append(s.slice(a, b));
      }
    }
    node.replaceWith(out);
  }
}

function addCopyButton(pre) {
  const code = pre.querySelector("code") || pre;
  const lang = /language-([\w+#.-]+)/.exec(code.className || "")?.[1] || "code";
  const head = document.createElement("div");
  head.className = "code-head";
  const label = document.createElement("span");
  label.textContent = lang;
  const btn = document.createElement("button");
  btn.type = "button";
  btn.className = "copy";
  btn.textContent = "Copy";
  btn.setAttribute("aria-label", `Copy ${lang === "code" ? "" : lang + " "}code`);
  btn.addEventListener("click", async () => {
    btn.textContent = (await copyText(code.textContent)) ? "Copied" : "Copy failed";
    setTimeout(() => { btn.textContent = "Copy"; }, 1500);
  });
  head.append(label, btn);
  const box = document.createElement("div");
  box.className = "codeblock";
  pre.replaceWith(box);
  box.append(head, pre);
}

/** The clipboard API needs a secure context (http://127.0.0.1 is one; a LAN address is not). */
async function copyText(text) {
  try {
    await navigator.clipboard.writeText(text);
    return true;
  } catch {
    const ta = document.createElement("textarea");
    ta.value = text;
    ta.setAttribute("readonly", "");
    ta.style.position = "fixed";
    ta.style.opacity = "0";
    document.body.append(ta);
    ta.select();
    const ok = document.execCommand("copy");
    ta.remove();
    return ok;
  }
}
