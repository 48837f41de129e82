/**
 * The Live screen's ETA reads the page's monotonic clock (RELIABILITY 933): the browser's wall
 * clock set back an hour between two steps (a time sync, a user) must not skew the step rate.
 */
import { act, render, screen } from "@testing-library/react";
import { afterEach, beforeEach, describe, expect, it, vi } from "vitest";
import { TrainingProvider } from "../api/training";
import { JOB, mockFetch } from "../test/fixtures";
import { LiveScreen } from "./LiveScreen";
import { FakeEventSource } from "../test/fakeEventSource";

const TOTAL = 100;
const progress = (step: number) => ({
  type: "progress", job_id: "j1", step, total_steps: TOTAL, epoch: 1, loss: 0.5, avg_loss: 0.5,
  lr: 1e-4, grad_norm: 1, samples_per_second: 2.5, peak_memory_gb: 1.5,
}); // fmt: skip

describe("Live: the ETA and the browser's clock", () => {
  let wall = 1_800_000_000_000; // Date.now(): the wall clock, moved by the test
  let mono = 50_000; // performance.now(): the page's monotonic clock
  beforeEach(() => {
    vi.stubGlobal("EventSource", FakeEventSource);
    vi.spyOn(Date, "now").mockImplementation(() => wall);
    vi.spyOn(performance, "now").mockImplementation(() => mono);
    mockFetch(({ url }) => {
      if (url.startsWith("/api/train/status")) return { body: { job: JOB, queue: [], busy: true, event_seq: 1 } };
      if (url.includes("/samples")) return { body: { samples: [] } };
      return undefined;
    });
  });
  afterEach(() => {
    vi.restoreAllMocks();
    vi.unstubAllGlobals();
  });

  it("keeps the step rate when the wall clock is set back an hour mid-run", async () => {
    render(
      <TrainingProvider>
        <LiveScreen />
      </TrainingProvider>,
    );
    await screen.findByTestId("stat-step");
    act(() => FakeEventSource.last?.emit("progress", progress(2)));
    wall -= 3_600_000 - 4_000; // 4 s later, the wall clock set back an hour
    mono += 4_000;
    act(() => FakeEventSource.last?.emit("progress", progress(10))); // 8 steps in 4 s: 0.5 s a step
    expect(screen.getByTestId("stat-eta")).toHaveTextContent("45s"); // 90 steps left
  });
});
