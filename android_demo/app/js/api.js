// The omnidraft server's OpenAI-compatible API, as the app uses it.
import { readSSE } from "./sse.js";

export class ApiError extends Error {
  constructor(status, message) { super(message); this.status = status; }
}

export class Api {
  /** @param {() => {url: string, apiKey: string}} conf read on every call, so settings apply at once */
  constructor(conf) { this.conf = conf; }

  base() { return (this.conf().url || "").replace(/\/+$/, ""); }

  headers(extra = {}) {
    const key = this.conf().apiKey;
    return key ? { ...extra, Authorization: `Bearer ${key}` } : extra;
  }

  async json(path, timeoutMs = 8000) {
    const ctl = new AbortController();
    const timer = setTimeout(() => ctl.abort(), timeoutMs);
    try {
      const r = await fetch(this.base() + path, { headers: this.headers(), signal: ctl.signal, cache: "no-store" });
      if (!r.ok) throw new ApiError(r.status, await errorText(r));
      return await r.json();
    } finally { clearTimeout(timer); }
  }

  health() { return this.json("/health"); }
  models() { return this.json("/v1/models"); }
  stats() { return this.json("/v1/omnidraft/stats"); }

  /**
   * Stream a chat completion.  onChunk(text, fromDraft) for each piece of content;
   * resolves with {stats, drafterVersion, finishReason} from the final chunk.
   */
  async chat(body, onChunk, signal) {
    const r = await fetch(this.base() + "/v1/chat/completions", {
      method: "POST", signal, cache: "no-store",
      headers: this.headers({ "Content-Type": "application/json", Accept: "text/event-stream" }),
      body: JSON.stringify({ ...body, stream: true }),
    });
    if (!r.ok) throw new ApiError(r.status, await errorText(r));
    const result = { stats: null, drafterVersion: null, finishReason: null };
    await readSSE(r, (data) => {
      if (data === "[DONE]") return;
      const chunk = JSON.parse(data);
      if (chunk.error) throw new ApiError(500, chunk.error.message || String(chunk.error));
      const choice = (chunk.choices || [])[0] || {};
      const text = choice.delta && choice.delta.content;
      const ext = chunk.omnidraft || {};
      if (text) onChunk(text, ext.from_draft === true);
      if (choice.finish_reason) result.finishReason = choice.finish_reason;
      if (ext.stats) result.stats = ext.stats;
      if (ext.drafter_version) result.drafterVersion = ext.drafter_version;
    });
    return result;
  }
}

async function errorText(r) {
  try {
    const j = await r.json();
    return (j.error && (j.error.message || j.error)) || JSON.stringify(j);
  } catch { return `HTTP ${r.status}`; }
}
