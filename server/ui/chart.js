// Line charts in plain SVG (no library): series against step, nice ticks on both axes, and
// a dashed marker wherever the ring re-formed (a point whose ring epoch is above the one before
// it). The <svg> carries data-points (points drawn) and each marker data-epoch, which the
// browser tests read.

const NS = "http://www.w3.org/2000/svg";
const W = 480, H = 200, M = { left: 50, right: 12, top: 12, bottom: 28 };

function el(name, attrs, text) {
  const node = document.createElementNS(NS, name);
  for (const [k, v] of Object.entries(attrs || {})) node.setAttribute(k, String(v));
  if (text !== undefined) node.textContent = text;
  return node;
}

// About n round tick values covering [lo, hi].
export function ticks(lo, hi, n) {
  if (!(hi > lo)) return [lo];
  const raw = (hi - lo) / Math.max(1, n);
  const mag = Math.pow(10, Math.floor(Math.log10(raw)));
  const step = [1, 2, 2.5, 5, 10].map((m) => m * mag).find((s) => s >= raw) || raw;
  const out = [];
  for (let v = Math.ceil(lo / step) * step; v <= hi + step * 1e-9; v += step) out.push(+v.toPrecision(12));
  return out;
}

export function formatNumber(v) {
  const a = Math.abs(v);
  if (a >= 1e6) return (v / 1e6).toFixed(a >= 1e7 ? 0 : 1) + "M";
  if (a >= 1e4) return (v / 1e3).toFixed(0) + "k";
  if (a >= 100) return v.toFixed(0);
  if (a >= 1) return v.toFixed(2).replace(/\.?0+$/, "");
  if (a === 0) return "0";
  return v.toPrecision(2);
}

// Draws points (objects with step, epoch and the series' fields) into svg. series: a field
// name, or a list of {field, label}; each gets its own line (classes "line s0", "line s1", ...).
// Values that are not finite (or, with opts.positive, not above 0) are left out of a line.
export function drawChart(svg, points, series, opts) {
  opts = opts || {};
  if (typeof series === "string") series = [{ field: series }];
  svg.setAttribute("viewBox", `0 0 ${W} ${H}`);
  svg.replaceChildren();
  const ok = (v) => Number.isFinite(v) && (!opts.positive || v > 0);
  const lines = series.map((s) => ({ ...s, shown: points.filter((p) => ok(p[s.field])) }));
  svg.dataset.points = String(lines[0].shown.length);
  const reforms = [];
  for (let i = 1; i < points.length; i++)
    if ((points[i].epoch || 0) > (points[i - 1].epoch || 0)) reforms.push(points[i]);
  svg.dataset.reforms = String(reforms.length);
  const values = lines.flatMap((l) => l.shown.map((p) => p[l.field]));
  if (values.length === 0) {
    svg.append(el("text", { x: W / 2, y: H / 2, "text-anchor": "middle", class: "empty" }, "no data yet"));
    return;
  }
  const steps = points.map((p) => p.step);
  let x0 = Math.min(...steps), x1 = Math.max(...steps);
  if (x1 === x0) x1 = x0 + 1;
  let y0 = Math.min(...values), y1 = Math.max(...values);
  if (opts.zero) y0 = Math.min(0, y0);
  if (y1 === y0) {
    y1 = y0 + Math.abs(y0 || 1) * 0.1;
    y0 = y0 - Math.abs(y0 || 1) * 0.1;
  }
  const pad = (y1 - y0) * 0.05;
  if (!opts.zero) y0 -= pad;
  y1 += pad;
  const sx = (v) => M.left + ((v - x0) / (x1 - x0)) * (W - M.left - M.right);
  const sy = (v) => H - M.bottom - ((v - y0) / (y1 - y0)) * (H - M.top - M.bottom);
  const grid = el("g", { class: "grid" });
  for (const t of ticks(y0, y1, 4)) {
    grid.append(el("line", { x1: M.left, x2: W - M.right, y1: sy(t), y2: sy(t) }));
    grid.append(el("text", { x: M.left - 6, y: sy(t) + 4, "text-anchor": "end" }, formatNumber(t)));
  }
  for (const t of ticks(x0, x1, 6)) {
    grid.append(el("line", { x1: sx(t), x2: sx(t), y1: M.top, y2: H - M.bottom, class: "v" }));
    grid.append(el("text", { x: sx(t), y: H - M.bottom + 16, "text-anchor": "middle" }, formatNumber(t)));
  }
  grid.append(el("text", { x: W - M.right, y: H - 2, "text-anchor": "end", class: "axis" }, "step"));
  svg.append(grid);
  for (const p of reforms) {
    const g = el("g", { class: "reform", "data-epoch": p.epoch, "data-step": p.step });
    g.append(el("line", { x1: sx(p.step), x2: sx(p.step), y1: M.top, y2: H - M.bottom }));
    g.append(el("text", { x: sx(p.step) + 3, y: M.top + 10 }, "epoch " + p.epoch));
    g.append(el("title", {}, `ring re-formed: epoch ${p.epoch}, ${p.ring_size} workers, at step ${p.step}`));
    svg.append(g);
  }
  lines.forEach((l, k) => {
    if (l.shown.length === 0) return;
    const path = l.shown.map((p) => `${sx(p.step).toFixed(1)},${sy(p[l.field]).toFixed(1)}`).join(" ");
    svg.append(el("polyline", { points: path, class: "line s" + k, "data-field": l.field, "data-points": l.shown.length }));
    const last = l.shown[l.shown.length - 1];
    svg.append(el("circle", { cx: sx(last.step), cy: sy(last[l.field]), r: 3, class: "dot s" + k }));
    if (l.label) svg.append(el("text", { x: M.left + 6, y: M.top + 12 + 13 * k, class: "legend s" + k }, l.label));
  });
}
