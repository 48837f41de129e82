import { describe, expect, it } from "vitest";
import { etaSeconds, observeStep, PACE_WINDOW_MS } from "./stepClock";

describe("the Live screen's ETA", () => {
  it("is measured from the steps this page saw advance, not from the run's start (its preparation)", () => {
    // the run prepared for 20 s; step 1 at t=20 s, then one step every 0.5 s
    let clock = observeStep(null, "job", 1, 20_000);
    expect(etaSeconds(clock, 400, 20_000)).toBeNull(); // one step seen: no rate yet
    clock = observeStep(clock, "job", 1, 20_300); // the same step again: nothing new
    clock = observeStep(clock, "job", 9, 24_000);
    expect(etaSeconds(clock, 400, 24_000)).toBeCloseTo(391 * 0.5); // 8 steps in 4 s
    expect(etaSeconds(clock, 400, 25_000)).toBeCloseTo(391 * 0.5 - 1); // counts down between steps
    expect(etaSeconds(clock, 400, 10_000_000)).toBe(0);
    expect(etaSeconds(observeStep(clock, "job", 400, 30_000), 400, 30_000)).toBe(0);
  });

  it("starts again for another job, and for a resumed run counts only its own steps", () => {
    const a = observeStep(observeStep(null, "a", 5, 0), "a", 10, 5_000); // 1 s a step
    const b = observeStep(a, "b", 200, 6_000); // resumed at step 200
    expect(etaSeconds(b, 300, 6_000)).toBeNull();
    const b2 = observeStep(b, "b", 202, 7_000); // 0.5 s a step
    expect(etaSeconds(b2, 300, 7_000)).toBeCloseTo(98 * 0.5);
  });
});

describe("the Live screen's ETA on a run whose steps got slower", () => {
  it("follows the run's pace over the last minute, not its average since the page opened", () => {
    // 100 steps at 1 s a step, then the host got busy: 4 s a step from step 100 on
    let clock = observeStep(null, "job", 0, 0);
    for (let step = 1; step <= 100; step++) clock = observeStep(clock, "job", step, step * 1000);
    for (let step = 101; step <= 130; step++) clock = observeStep(clock, "job", step, 100_000 + (step - 100) * 4000);
    const at = clock.last.at; // 220 s: the last 2 minutes all at the new pace
    expect(etaSeconds(clock, 1130, at)).toBeCloseTo(1000 * 4); // the old code: 1000 x 220 / 130 = 1692 s
    expect(clock.first.at).toBeGreaterThanOrEqual(at - PACE_WINDOW_MS - 4000);
    expect(clock.seen.length).toBeLessThanOrEqual(17); // the window's steps, not every step seen
  });

  it("keeps two steps at least when a step takes longer than the window", () => {
    let clock = observeStep(observeStep(null, "job", 1, 0), "job", 2, 90_000);
    clock = observeStep(clock, "job", 3, 200_000); // 110 s a step now
    expect(etaSeconds(clock, 5, 200_000)).toBeCloseTo(2 * 110);
  });
});
