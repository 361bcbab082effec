// Settings persisted in localStorage (this device only).
// Only what the user changed is stored, so a new default (the method became "hybrid" on 2026-11-28)
// reaches everyone who never chose otherwise.
const KEY = "omnidraft.settings.v2";
// Until 2026-11-28 every field was stored, defaults included: read once, then replaced by KEY.
const KEY_V1 = "omnidraft.settings.v1";

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

// The defaults v1 stored: a v1 value equal to its default then was no choice, and follows today's default.
const DEFAULTS_V1 = Object.freeze({ ...DEFAULTS, method: "omnidraft" });

/** The fields of ``s`` that differ from ``defaults`` (known fields only). */
function choices(s, defaults) {
  return Object.fromEntries(Object.entries(s || {}).filter(([k, v]) => k in defaults && v !== defaults[k]));
}

export function loadSettings() {
  try {
    const saved = localStorage.getItem(KEY);
    if (saved !== null) return { ...DEFAULTS, ...choices(JSON.parse(saved), DEFAULTS) };
    return { ...DEFAULTS, ...choices(JSON.parse(localStorage.getItem(KEY_V1) || "{}"), DEFAULTS_V1) };
  } catch { return { ...DEFAULTS }; }
}

export function saveSettings(s) {
  localStorage.setItem(KEY, JSON.stringify(choices(s, DEFAULTS)));
  localStorage.removeItem(KEY_V1);
}

/** The request body's generation part, from the settings. */
export function requestOptions(s) {
  const body = { max_tokens: s.maxTokens, temperature: s.temperature,
                 omnidraft: { method: s.method, k: s.k, policy: s.adaptive ? "cost" : "fixed" } };
  if (s.model) body.model = s.model;
  if (s.temperature > 0) body.seed = Math.floor(Math.random() * 2 ** 31);
  return body;
}
