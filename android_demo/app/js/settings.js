// Settings persisted in localStorage (this device only).
const KEY = "omnidraft.settings.v1";

export const DEFAULTS = Object.freeze({
  url: "",            // "" = the server this app was loaded from
  apiKey: "",
  model: "",          // "" = the server's default (first of /v1/models)
  method: "hybrid",   // the server's default too: lookup's free drafts first, the drafter otherwise
  temperature: 0,
  k: 4,
  adaptive: true,     // policy "cost"; off = "fixed" with draft length k
  maxTokens: 256,
});

export function loadSettings() {
  try { return { ...DEFAULTS, ...JSON.parse(localStorage.getItem(KEY) || "{}") }; }
  catch { return { ...DEFAULTS }; }
}

export function saveSettings(s) { localStorage.setItem(KEY, JSON.stringify(s)); }

/** The request body's generation part, from the settings. */
export function requestOptions(s) {
  const body = { max_tokens: s.maxTokens, temperature: s.temperature,
                 omnidraft: { method: s.method, k: s.k, policy: s.adaptive ? "cost" : "fixed" } };
  if (s.model) body.model = s.model;
  if (s.temperature > 0) body.seed = Math.floor(Math.random() * 2 ** 31);
  return body;
}
