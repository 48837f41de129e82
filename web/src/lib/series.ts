/**
 * Chart series from metric points. Points arrive one per progress event; `appendPoint` keeps the
 * arrays sorted by step and replaces a point of a repeated step (resume after reconnect). A series
 * keeps at most MAX_POINTS: past it every other point goes and the least step distance between
 * appended points doubles (the server's MetricHistory does the same, jobs/records.py), so a page
 * left open for a 100,000-step run holds and copies 2,000 points an event, not every step's
 * (RELIABILITY 1291), and its points still span the whole run evenly.
 */
import type { Series } from "../components/LineChart";
import type { MetricPoint, ProgressEvent, ValidationPoint } from "../api/types";

export interface MetricSeries {
  steps: number[];
  loss: (number | null)[];
  avgLoss: (number | null)[];
  lr: (number | null)[];
  /** The least step distance from the last point to a newly appended one (doubles at each thinning). */
  stride: number;
}

/** The most points a series keeps (the chart draws about one a pixel; the server's status keeps 2,000). */
export const MAX_POINTS = 2000;

export const emptySeries = (): MetricSeries => ({ steps: [], loss: [], avgLoss: [], lr: [], stride: 1 });

type PointLike = Pick<MetricPoint, "step" | "loss" | "avg_loss" | "lr"> | ProgressEvent;

/** `s` with every other point dropped (the last kept) and its stride doubled, while it holds more than MAX_POINTS. */
function thinned(s: MetricSeries): MetricSeries {
  let out = s;
  while (out.steps.length > MAX_POINTS) {
    const n = out.steps.length;
    const keep = (_: unknown, i: number) => i % 2 === (n - 1) % 2; // the newest point stays
    out = {
      steps: out.steps.filter(keep),
      loss: out.loss.filter(keep),
      avgLoss: out.avgLoss.filter(keep),
      lr: out.lr.filter(keep),
      stride: out.stride * 2,
    };
  }
  return out;
}

/**
 * A new MetricSeries with `p` added (arrays are copied only from the insertion point on). A
 * point after the last one but closer to it than the stride is not kept (the progress read-out
 * shows it); one of a step already there replaces it.
 */
export function appendPoint(s: MetricSeries, p: PointLike): MetricSeries {
  const n = s.steps.length;
  const last = n ? s.steps[n - 1] : -Infinity;
  if (p.step > last) {
    if (p.step - last < s.stride) return s;
    return thinned({
      steps: [...s.steps, p.step],
      loss: [...s.loss, p.loss ?? null],
      avgLoss: [...s.avgLoss, p.avg_loss ?? null],
      lr: [...s.lr, p.lr ?? null],
      stride: s.stride,
    });
  }
  const i = s.steps.findIndex((x) => x >= p.step);
  const replace = s.steps[i] === p.step ? 1 : 0;
  const splice = <T,>(arr: T[], v: T) => [...arr.slice(0, i), v, ...arr.slice(i + replace)];
  return thinned({
    steps: splice(s.steps, p.step),
    loss: splice(s.loss, p.loss ?? null),
    avgLoss: splice(s.avgLoss, p.avg_loss ?? null),
    lr: splice(s.lr, p.lr ?? null),
    stride: s.stride,
  });
}

/**
 * A MetricSeries from a list of stored points (the server's: at most 2,000, spread over the run).
 * Its stride is the largest power of two at most their mean step distance, so the points appended
 * after them are about as dense as they are.
 */
export function fromPoints(points: PointLike[]): MetricSeries {
  const sorted = [...points].sort((a, b) => a.step - b.step);
  const n = sorted.length;
  const mean = n > 1 ? (sorted[n - 1].step - sorted[0].step) / (n - 1) : 1;
  return thinned({
    steps: sorted.map((p) => p.step),
    loss: sorted.map((p) => p.loss ?? null),
    avgLoss: sorted.map((p) => p.avg_loss ?? null),
    lr: sorted.map((p) => p.lr ?? null),
    stride: 2 ** Math.max(0, Math.floor(Math.log2(Math.max(1, mean)))),
  });
}

/** The three chart lines: loss, average loss (left axis) and learning rate (right axis). */
export function chartSeries(s: MetricSeries): Series[] {
  return [
    { name: "loss", color: "#6b8afd", values: s.loss },
    { name: "avg loss", color: "#f2b84b", values: s.avgLoss },
    { name: "lr", color: "#4cc9a0", values: s.lr, axis: "right", dashed: true },
  ];
}

/** A job's or run's validation rounds with `p` added (a round of the same step replaced), by step. */
export function withValidation(points: ValidationPoint[], p: ValidationPoint): ValidationPoint[] {
  return [...points.filter((q) => q.step !== p.step), { step: p.step, loss: p.loss }].sort((a, b) => a.step - b.step);
}

/**
 * The chart's x values and lines: the training lines of `s` and, when there are validation rounds,
 * a "val loss" line beside the loss (left axis). The x values are the union of both steps; a line
 * has no point (undefined) where only the other has one, so neither breaks there.
 */
export function chartData(s: MetricSeries, validation: ValidationPoint[] = []): { xs: number[]; series: Series[] } {
  const lines = chartSeries(s);
  if (!validation.length) return { xs: s.steps, series: lines };
  const xs = [...new Set([...s.steps, ...validation.map((v) => v.step)])].sort((a, b) => a - b);
  const at = new Map(s.steps.map((x, i) => [x, i]));
  const val = new Map(validation.map((v) => [v.step, v.loss ?? null]));
  const series: Series[] = lines.map((line) => ({
    ...line,
    values: xs.map((x) => (at.has(x) ? line.values[at.get(x) as number] : undefined)),
  }));
  series.splice(2, 0, { name: "val loss", color: "#e5484d", values: xs.map((x) => (val.has(x) ? val.get(x) : undefined)) });
  return { xs, series };
}
