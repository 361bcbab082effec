// A small inline-SVG line chart: one series over time, dashed lines where the drafter version changed.
const NS = "http://www.w3.org/2000/svg";

function el(name, attrs, text) {
  const e = document.createElementNS(NS, name);
  for (const [k, v] of Object.entries(attrs)) e.setAttribute(k, v);
  if (text !== undefined) e.textContent = text;
  return e;
}

/**
 * points: [{t, y, version}] sorted by t.  opts: {title, yMax (or auto), format(y) -> string, and optionally
 * xText(t) -> string (default: the clock time), last (the status line), reference: {y, label} (a dashed
 * horizontal line, e.g. a control), versions: false (no dashed line where the version changes)}.
 * Returns an <svg> sized by its viewBox (width follows the container).  The title has the first line to itself
 * and the last value (or "no data yet") the second, so a long title never runs into it.
 */
export function lineChart(points, opts) {
  const W = 360, H = 172, L = 40, R = 10, T = 46, B = 22;
  const svg = el("svg", { viewBox: `0 0 ${W} ${H}`, "aria-hidden": "true", focusable: "false" });
  svg.append(el("text", { x: 0, y: 14, class: "title" }, opts.title));
  const last = !points.length ? "no data yet" : opts.last ?? `last ${opts.format(points[points.length - 1].y)}`;
  svg.append(el("text", { x: 0, y: 31, class: "status" }, last));
  const ref = opts.reference;
  const yMax = opts.yMax ?? Math.max(1e-9, ...points.map((p) => p.y), ref ? ref.y : 0) * 1.1;
  const xText = opts.xText ?? clock;
  const t0 = points.length ? points[0].t : 0, t1 = points.length ? points[points.length - 1].t : 1;
  const x = (t) => L + (t1 > t0 ? (t - t0) / (t1 - t0) : 0.5) * (W - L - R);
  const y = (v) => T + (1 - Math.min(v, yMax) / yMax) * (H - T - B);
  for (const frac of [0, 0.5, 1]) {
    svg.append(el("line", { x1: L, x2: W - R, y1: y(frac * yMax), y2: y(frac * yMax), class: "axis" }));
    // without data an automatic scale has no values: no "0.0 / 0.0 / 0.0"
    if (points.length || opts.yMax !== undefined) {
      svg.append(el("text", { x: L - 4, y: y(frac * yMax) + 4, "text-anchor": "end" }, opts.format(frac * yMax)));
    }
  }
  if (points.length) {
    svg.append(el("text", { x: L, y: H - 6 }, xText(t0)));
    svg.append(el("text", { x: W - R, y: H - 6, "text-anchor": "end" }, xText(t1)));
  }
  if (ref) {   // the label sits at the line's right end, clear of the y labels on the left, on the side
    // away from the series' last point (which ends there too)
    const lastY = points.length ? points[points.length - 1].y : ref.y;
    svg.append(el("line", { x1: L, x2: W - R, y1: y(ref.y), y2: y(ref.y), class: "ref" }));
    svg.append(el("text", { x: W - R, y: lastY > ref.y ? y(ref.y) + 13 : y(ref.y) - 4, "text-anchor": "end",
                            class: "ref-label" }, ref.label));
  }
  for (let i = 1; i < points.length && opts.versions !== false; i++) {
    if (points[i].version !== points[i - 1].version) {
      const xv = (x(points[i - 1].t) + x(points[i].t)) / 2;
      svg.append(el("line", { x1: xv, x2: xv, y1: T, y2: H - B, class: "ver" }));
      svg.append(el("text", { x: xv + 3, y: T + 10 }, points[i].version));
    }
  }
  if (points.length > 1) {
    const d = points.map((p, i) => `${i ? "L" : "M"}${x(p.t).toFixed(1)},${y(p.y).toFixed(1)}`).join("");
    svg.append(el("path", { d, class: "series" }));
  }
  for (const p of points) svg.append(el("circle", { cx: x(p.t), cy: y(p.y), r: 3, class: "pt" }));
  return svg;
}

function clock(t) {
  return new Date(t * 1000).toLocaleTimeString([], { hour: "2-digit", minute: "2-digit" });
}
