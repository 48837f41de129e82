/**
 * The Live screen's Elapsed is the server's (`elapsed_s`, its monotonic clock) moved on by the
 * page's monotonic clock (RELIABILITY 1023): a browser whose wall clock is ten minutes behind a
 * remote server's showed "0s" for ten minutes (Date.now() less the server's started_at).
 */
import { act, render, screen } from "@testing-library/react";
import { afterEach, beforeEach, describe, expect, it, vi } from "vitest";
import { TrainingProvider } from "../api/training";
import { JOB, mockFetch } from "../test/fixtures";
import { LiveScreen } from "./LiveScreen";
import { FakeEventSource } from "../test/fakeEventSource";

describe("Live: Elapsed and the server's clock", () => {
  const started = Date.parse(JOB.started_at);
  let mono = 50_000; // performance.now(): the page's monotonic clock
  beforeEach(() => {
    vi.stubGlobal("EventSource", FakeEventSource);
    vi.spyOn(Date, "now").mockImplementation(() => started + 60_000 - 600_000); // 10 min behind the server
    vi.spyOn(performance, "now").mockImplementation(() => mono);
    mockFetch(({ url }) => {
      if (url.startsWith("/api/train/status")) {
        return { body: { job: { ...JOB, elapsed_s: 60 }, queue: [], busy: true, event_seq: 1 } };
      }
      if (url.includes("/samples")) return { body: { samples: [] } };
      return undefined;
    });
  });
  afterEach(() => {
    vi.restoreAllMocks();
    vi.unstubAllGlobals();
  });

  it("counts from the server's elapsed seconds on the page's monotonic clock", async () => {
    render(
      <TrainingProvider>
        <LiveScreen />
      </TrainingProvider>,
    );
    expect(await screen.findByTestId("stat-elapsed")).toHaveTextContent("1m 00s");
    mono += 5_000;
    act(() => FakeEventSource.last?.emit("progress", {
      type: "progress", job_id: "j1", step: 2, total_steps: 100, epoch: 1, loss: 0.5, avg_loss: 0.5,
      lr: 1e-4, grad_norm: 1, samples_per_second: 2.5, peak_memory_gb: 1.5,
    })); // fmt: skip
    expect(screen.getByTestId("stat-elapsed")).toHaveTextContent("1m 05s");
  });
});
