// What the figures of one answer say, from the server's final stats (GenerationStats.as_dict).

/**
 * Tokens per target pass, counting the passes that emitted them: {value, exact}, or null when no pass emitted a
 * token.  Every target pass emits the drafted tokens it accepted plus one token of its own, except the last:
 * its tokens end at the end-of-text token, which is not text, so the last pass may emit nothing.  The server
 * divides by all passes (`tau` = completion_tokens / target_passes), so an answer of N tokens whose last pass
 * produced only the end token reads N / (N + 1), e.g. 49 / 50 = 0.98: that pass is not counted here.  From the
 * counts, with C tokens, P passes and A accepted drafts, the last pass emitted C - A_before - (P - 1) tokens:
 *   - C < P: all passes but the last emitted at least one token, so the last emitted none: C / (P - 1);
 *   - C - A - (P - 1) >= 1: the last pass emitted (it emitted that many more than it accepted): C / P;
 *   - the last pass drafted nothing (draft_lengths) and C - A - (P - 1) = 0: it emitted none: C / (P - 1);
 *   - otherwise the counts can't tell whether the last pass emitted: C / P is a lower bound, exact: false.
 * Nothing is rounded up or clamped.
 */
export function tokensPerPass(s) {
  const C = s.completion_tokens, P = s.target_passes;
  // servers that send stop_tokens count the end-of-text token as the token its pass produced: exact
  if (typeof s.stop_tokens === "number" && typeof C === "number" && P > 0) {
    return C + s.stop_tokens > 0 ? { value: (C + s.stop_tokens) / P, exact: true } : null;
  }
  if (typeof C !== "number" || typeof P !== "number") {   // no counts: the server's figure as it is
    return typeof s.tau === "number" && s.tau > 0 ? { value: s.tau, exact: true } : null;
  }
  if (C <= 0 || P <= 0) return null;
  if (C < P) return { value: C / (P - 1), exact: true };
  if (typeof s.accepted !== "number") return { value: C / P, exact: false };
  const lastMinusAccepted = C - s.accepted - (P - 1);   // tokens the last pass emitted minus drafts it accepted
  if (lastMinusAccepted >= 1) return { value: C / P, exact: true };
  const lengths = s.draft_lengths;
  const lastDrafted = Array.isArray(lengths) && lengths.length === P ? lengths[P - 1] : null;
  if (lastDrafted === 0 && lastMinusAccepted === 0 && P > 1) return { value: C / (P - 1), exact: true };
  return { value: C / P, exact: false };
}

/** "1.85", "≥1.85" when only a lower bound is known, "–" when there is nothing to divide. */
export function tauText(s) {
  const r = tokensPerPass(s);
  return r ? `${r.exact ? "" : "≥"}${r.value.toFixed(2)}` : "–";
}

export const TAU_BOUND_NOTE = "at least: the server's counts can't tell whether the last target pass emitted "
  + "a token or only ended the answer";

/** Why nothing was drafted, in words (policy_note is the server's DraftPolicy.note). */
function whyNotDrafting(s) {
  const note = s.policy_note || "";
  if (s.method === "target" || /^no drafter/.test(note)) return "the target ran alone, as asked";
  if (/ran the target alone|slower here/.test(note)) return "target alone is faster here";
  if (/^no room to draft/.test(note)) return "no room to draft";
  return "nothing was drafted this time";
}

/** The acceptance figure: {short} for the figures bar, {long} for the line under the answer.
 *  With nothing drafted there is no rate: "not drafting" and why, never "0% accepted". */
export function acceptance(s) {
  if (s.proposed === 0) return { short: "not drafting", long: `not drafting: ${whyNotDrafting(s)}` };
  const rate = s.acceptance_rate ?? (s.proposed > 0 ? s.accepted / s.proposed : 0);
  const pct = `${Math.round(100 * rate)}%`;
  return { short: pct, long: `${pct} accepted` };
}
