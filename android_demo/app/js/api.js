// The omnidraft server's OpenAI-compatible API, as the app uses it.
import { readSSE } from "./sse.js";

export class ApiError extends Error {
  constructor(status, message) { super(message); this.status = status; }
}

/** Nothing answered at the server's address (fetch() only says "Failed to fetch"): name the server. */
export class Unreachable extends Error {
  constructor(url, midAnswer = false) {
    super(midAnswer ? `lost the connection to the omnidraft server at ${url}: is it still running?`
      : `can't reach the omnidraft server at ${url}: is it running?`);
    this.name = "Unreachable";
    this.url = url;
  }
}

export class Api {
  /** @param {() => {url: string, apiKey: string}} conf read on every call, so settings apply at once */
  constructor(conf) { this.conf = conf; }

  base() { return (this.conf().url || "").replace(/\/+$/, ""); }

  /** The server's address in words: the configured URL, else the origin this app came from. */
  where() { return this.base() || location.origin; }

  /** fetch(), with a network failure (a TypeError) turned into Unreachable; aborts stay AbortError. */
  async fetch(path, init) {
    try {
      return await fetch(this.base() + path, init);
    } catch (e) {
      throw e.name === "AbortError" ? e : new Unreachable(this.where());
    }
  }

  headers(extra = {}) {
    const key = this.conf().apiKey;
    return key ? { ...extra, Authorization: `Bearer ${key}` } : extra;
  }

  async json(path, timeoutMs = 8000) {
    const ctl = new AbortController();
    const timer = setTimeout(() => ctl.abort(), timeoutMs);
    try {
      const r = await this.fetch(path, { headers: this.headers(), signal: ctl.signal, cache: "no-store" });
      if (!r.ok) throw new ApiError(r.status, await errorText(r));
      return await r.json();
    } finally { clearTimeout(timer); }
  }

  health() { return this.json("/health"); }
  models() { return this.json("/v1/models"); }
  stats() { return this.json("/v1/omnidraft/stats"); }

  /**
   * Stream a chat completion.  onChunk(text, fromDraft) for each piece of content;
   * resolves with {stats, drafterVersion, finishReason, timedOut} from the final chunk.
   */
  async chat(body, onChunk, signal) {
    const r = await this.fetch("/v1/chat/completions", {
      method: "POST", signal, cache: "no-store",
      headers: this.headers({ "Content-Type": "application/json", Accept: "text/event-stream" }),
      body: JSON.stringify({ ...body, stream: true }),
    });
    if (!r.ok) throw new ApiError(r.status, await errorText(r));
    const result = { stats: null, drafterVersion: null, finishReason: null, timedOut: false };
    let handling = false;      // an error thrown while handling an event is not a lost connection
    try {
      await readSSE(r, (data) => {
        handling = true;
        this.event(data, result, onChunk);
        handling = false;
      });
    } catch (e) {
      throw e.name === "TypeError" && !handling ? new Unreachable(this.where(), true) : e;
    }
    return result;
  }

  /** One SSE event of a chat stream: content to onChunk, the final chunk's figures into result. */
  event(data, result, onChunk) {
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
    if (ext.timed_out) result.timedOut = true;   // finish_reason "length" then means the time limit
  }
}

async function errorText(r) {
  try {
    const j = await r.json();
    return (j.error && (j.error.message || j.error)) || JSON.stringify(j);
  } catch { return `HTTP ${r.status}`; }
}
