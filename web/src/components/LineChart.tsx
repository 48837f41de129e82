import { useId, useLayoutEffect, useMemo, useRef, useState } from "react";
import { formatNumber } from "../lib/format";

/** One plotted line: `values[i]` is the y of `xs[i]` (null = gap; undefined = no point at that x, the line runs on). */
export interface Series {
  name: string;
  color: string;
  values: (number | null | undefined)[];
  /** "left" (default) or "right" y axis (e.g. the learning rate). */
  axis?: "left" | "right";
  dashed?: boolean;
}

interface Props {
  xs: number[];
  series: Series[];
  height?: number;
  xLabel?: string;
  /** Shown when there are no points yet. */
  empty?: string;
}

const PAD = { top: 12, right: 56, bottom: 24, left: 52 };

/** The padded [low, high] of the finite values (null: none); values that are all non-negative (a loss, a learning rate) never get an axis below zero. */
export function extent(values: (number | null | undefined)[]): [number, number] | null {
  let lo = Infinity;
  let hi = -Infinity;
  for (const v of values) {
    if (v == null || !Number.isFinite(v)) continue;
    lo = Math.min(lo, v);
    hi = Math.max(hi, v);
  }
  if (lo === Infinity) return null;
  const floor = (x: number) => (lo >= 0 ? Math.max(0, x) : x);
  if (lo === hi) return [floor(lo - (Math.abs(lo) || 1) * 0.05), hi + (Math.abs(hi) || 1) * 0.05];
  const pad = (hi - lo) * 0.06;
  return [floor(lo - pad), hi + pad];
}

/** At most `max` indices spread evenly over 0..n-1 (the last index always included). */
export function decimate(n: number, max: number): number[] {
  if (n <= max) return Array.from({ length: n }, (_, i) => i);
  const out: number[] = [];
  const step = (n - 1) / (max - 1);
  for (let i = 0; i < max; i++) out.push(Math.round(i * step));
  return out;
}

/** SVG path of one series: gaps (null, non-finite) split the line into segments; x's without a point (undefined) are passed over. */
export function seriesPath(
  xs: number[],
  values: (number | null | undefined)[],
  idx: number[],
  sx: (x: number) => number,
  sy: (y: number) => number,
): string {
  let d = "";
  let pen = false;
  for (const i of idx) {
    const v = values[i];
    if (v === undefined) continue; // no sample at this x (e.g. a validation round between them)
    if (v === null || !Number.isFinite(v)) {
      pen = false;
      continue;
    }
    d += `${pen ? "L" : "M"}${sx(xs[i]).toFixed(1)},${sy(v).toFixed(1)}`;
    pen = true;
  }
  return d;
}

/**
 * The chart's text alternative: the history of its first line (the loss) in words, e.g. "loss
 * over 120 steps (step 1 to 120): first 0.52, lowest 0.31 at step 97, latest 0.33." A second
 * left-axis line that has points (a validation loss) adds its latest and lowest. null: no point.
 */
export function chartSummary(xs: number[], series: Series[], xLabel = "step"): string | null {
  const stats = (s: Series) => {
    let first: number | null = null;
    let latest: number | null = null;
    let low: number | null = null;
    let lowAt = 0;
    let lastAt = 0;
    let n = 0;
    for (let i = 0; i < s.values.length; i++) {
      const v = s.values[i];
      if (v == null || !Number.isFinite(v)) continue;
      n += 1;
      if (first == null) first = v;
      latest = v;
      lastAt = xs[i];
      if (low == null || v < low) {
        low = v;
        lowAt = xs[i];
      }
    }
    return { first, latest, low, lowAt, lastAt, n };
  };
  const [main, ...rest] = series;
  if (!main) return null;
  const m = stats(main);
  if (!m.n) return null;
  const plural = m.n === 1 ? "" : "s";
  let text =
    `${main.name} over ${m.n} ${xLabel}${plural} (to ${xLabel} ${m.lastAt}): first ${formatNumber(m.first)}, ` +
    `lowest ${formatNumber(m.low)} at ${xLabel} ${m.lowAt}, latest ${formatNumber(m.latest)}.`;
  for (const s of rest) {
    if (s.axis === "right" || s.name.startsWith("avg")) continue; // the lr, the running mean of the loss
    const o = stats(s);
    if (o.n)
      text += ` ${s.name}: lowest ${formatNumber(o.low)} at ${xLabel} ${o.lowAt}, latest ${formatNumber(o.latest)} (${xLabel} ${o.lastAt}).`;
  }
  return text;
}

/** The chart's own width: measured before its first paint (a layout effect), then followed by a
 * ResizeObserver. 640 only where nothing can be measured (no layout: jsdom). Measured first, not
 * only observed: the observer answers a frame later, and until then a chart that mounted with its
 * points drew 640 px wide and stuck out of a 320-420 px screen while the page loaded (RELIABILITY
 * 1481). */
function useWidth(): [React.RefObject<HTMLDivElement | null>, number] {
  const ref = useRef<HTMLDivElement | null>(null);
  const [width, setWidth] = useState(640);
  useLayoutEffect(() => {
    const el = ref.current;
    if (!el) return;
    const now = Math.floor(el.getBoundingClientRect().width);
    if (now > 0) setWidth(now); // re-rendered before the browser paints
    if (typeof ResizeObserver === "undefined") return;
    const ro = new ResizeObserver((entries) => {
      const w = Math.floor(entries[0].contentRect.width);
      if (w > 0) setWidth(w);
    });
    ro.observe(el);
    return () => ro.disconnect();
  }, []);
  return [ref, width];
}

function ticks(lo: number, hi: number, n: number): number[] {
  return Array.from({ length: n }, (_, i) => lo + ((hi - lo) * i) / (n - 1));
}

/** The x axis's ticks: at most `n` whole steps from `lo` to `hi`, each once (a 3-step run's axis
 * reads "1 2 3", not "1 1 2 2 3 3"), each where its step is. */
export function xTicks(lo: number, hi: number, n: number): number[] {
  return [...new Set(ticks(lo, hi, n).map((t) => Math.round(t)))];
}

/**
 * A dependency-free SVG line chart: shared x (steps), a left and an optional right y axis,
 * a legend, and a hover read-out. Draws at most ~one point per pixel per series. Its text
 * alternative (`chartSummary`: visually hidden, the SVG's aria-describedby, read in order after
 * it) tells the first line's history: points so far, first, lowest (at which x), latest.
 */
export function LineChart({ xs, series, height = 240, xLabel = "step", empty = "No data yet" }: Props) {
  const [ref, width] = useWidth();
  const [hover, setHover] = useState<number | null>(null);
  const summaryId = useId();
  const summary = useMemo(() => chartSummary(xs, series, xLabel), [xs, series, xLabel]);
  const innerW = Math.max(10, width - PAD.left - PAD.right);
  const innerH = Math.max(10, height - PAD.top - PAD.bottom);
  const hasRight = series.some((s) => s.axis === "right");

  const geo = useMemo(() => {
    const xr = extent(xs);
    const left = extent(series.filter((s) => s.axis !== "right").flatMap((s) => s.values));
    const right = extent(series.filter((s) => s.axis === "right").flatMap((s) => s.values));
    return { xr, left, right };
  }, [xs, series]);

  if (!xs.length || !geo.xr) {
    return (
      <div ref={ref} className="chart chart-empty" style={{ height }} data-testid="chart">
        {empty}
      </div>
    );
  }
  const [x0, x1] = xs.length === 1 ? [xs[0] - 1, xs[0] + 1] : [xs[0], xs[xs.length - 1]];
  const sx = (x: number) => PAD.left + ((x - x0) / (x1 - x0 || 1)) * innerW;
  const scaleY = (r: [number, number] | null) => (y: number) =>
    r ? PAD.top + innerH - ((y - r[0]) / (r[1] - r[0] || 1)) * innerH : PAD.top + innerH / 2;
  const syL = scaleY(geo.left);
  const syR = scaleY(geo.right);
  const idx = decimate(xs.length, Math.max(2, innerW));

  const onMove = (e: React.MouseEvent<SVGSVGElement>) => {
    const rect = e.currentTarget.getBoundingClientRect();
    const x = x0 + ((e.clientX - rect.left - PAD.left) / innerW) * (x1 - x0);
    let best = 0;
    for (let i = 1; i < xs.length; i++) if (Math.abs(xs[i] - x) < Math.abs(xs[best] - x)) best = i;
    setHover(best);
  };

  return (
    <div ref={ref} className="chart" data-testid="chart" data-points={xs.length}>
      <div className="chart-legend">
        {series.map((s) => (
          <span key={s.name} className="legend-item">
            <i style={{ background: s.color }} />
            {s.name}
            {hover != null && <b>{formatNumber(s.values[hover])}</b>}
          </span>
        ))}
        {hover != null && (
          <span className="legend-item muted">
            {xLabel} {xs[hover]}
          </span>
        )}
      </div>
      <svg
        width={width}
        height={height}
        role="img"
        aria-label="training chart"
        aria-describedby={summary ? summaryId : undefined}
        onMouseMove={onMove}
        onMouseLeave={() => setHover(null)}
      >
        {geo.left &&
          ticks(geo.left[0], geo.left[1], 5).map((t) => (
            <g key={`l${t}`}>
              <line className="grid" x1={PAD.left} x2={PAD.left + innerW} y1={syL(t)} y2={syL(t)} />
              <text className="tick" x={PAD.left - 6} y={syL(t) + 4} textAnchor="end">
                {formatNumber(t, 3)}
              </text>
            </g>
          ))}
        {hasRight &&
          geo.right &&
          ticks(geo.right[0], geo.right[1], 5).map((t) => (
            <text key={`r${t}`} className="tick" x={PAD.left + innerW + 6} y={syR(t) + 4}>
              {formatNumber(t, 2)}
            </text>
          ))}
        {xTicks(x0, x1, Math.min(6, Math.max(2, Math.floor(innerW / 90)))).map((t) => (
          <text key={`x${t}`} className="tick" x={sx(t)} y={height - 6} textAnchor="middle">
            {t}
          </text>
        ))}
        {series.map((s) => (
          <path
            key={s.name}
            className="series"
            data-series={s.name}
            d={seriesPath(xs, s.values, idx, sx, s.axis === "right" ? syR : syL)}
            stroke={s.color}
            strokeDasharray={s.dashed ? "4 3" : undefined}
          />
        ))}
        {hover != null && (
          <line className="cursor" x1={sx(xs[hover])} x2={sx(xs[hover])} y1={PAD.top} y2={PAD.top + innerH} />
        )}
      </svg>
      {/* the history in words for a screen reader: current at every step, but not a live region
          (a step a second would flood it; the Live screen's ProgressAnnouncer says the progress) */}
      <p id={summaryId} className="visually-hidden" data-testid="chart-summary">
        {summary}
      </p>
    </div>
  );
}
