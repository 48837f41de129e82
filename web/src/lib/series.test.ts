import { describe, expect, it } from "vitest";
import { appendPoint, emptySeries, fromPoints, MAX_POINTS, type MetricSeries } from "./series";

const point = (step: number) => ({ step, loss: 1 / step, avg_loss: 1 / step, lr: 1e-4 });

describe("a chart series over a long run (session 35 long-run audit, RELIABILITY 1291)", () => {
  it("a page left open for 20,000 steps holds at most MAX_POINTS, spread over the whole run", () => {
    // before: one point a step, every array copied whole at each event (the page's memory and
    // each event's work grew with the run: 100,000 points and 400,000 copies an event at the end)
    let s: MetricSeries = emptySeries();
    for (let step = 1; step <= 20_000; step++) s = appendPoint(s, point(step));
    expect(s.steps.length).toBeLessThanOrEqual(2000); // old: 20,000 (and 20 s of copies here)
    expect(s.steps.length).toBeGreaterThan(MAX_POINTS / 2);
    expect([s.loss.length, s.avgLoss.length, s.lr.length]).toEqual([s.steps.length, s.steps.length, s.steps.length]);
    expect(s.steps[0]).toBeLessThanOrEqual(16);
    expect(s.steps.every((x, i) => i === 0 || x > s.steps[i - 1])).toBe(true);
    const early = s.steps.filter((x) => x <= 10_000).length;
    expect(Math.abs(early - s.steps.length / 2)).toBeLessThan(s.steps.length * 0.05); // even
    expect(s.loss[s.steps.length - 1]).toBe(1 / s.steps[s.steps.length - 1]);
  });

  it("a point of a step already shown replaces it; one closer than the stride waits for the next", () => {
    const s = fromPoints([0, 1, 2, 3, 4].map((i) => point(1 + 16 * i))); // the server's history, every 16 steps
    expect(s.stride).toBe(16);
    expect(appendPoint(s, point(70)).steps).toEqual(s.steps); // 65 + 5: within the stride
    expect(appendPoint(s, point(81)).steps).toEqual([1, 17, 33, 49, 65, 81]);
    const again = appendPoint(s, { step: 33, loss: 9, avg_loss: 9, lr: 1e-4 }); // a resume after reconnect
    expect(again.steps).toEqual(s.steps);
    expect(again.loss[2]).toBe(9);
    expect(fromPoints([]).steps).toEqual([]);
  });
});
