/**
 * Live's ETA read "–" while a run prepared (text encoders, captions, latents: ~50 s of the tiny
 * run's 2 min) although Check had given a time forecast (session 36 journey). A run started after
 * a Check keeps that forecast (lib/runForecast.ts), and the ETA shows what is left of it, labelled
 * a forecast, until two steps measure a pace (session 37 kpfix6).
 */
import { act, render, screen, waitFor } from "@testing-library/react";
import userEvent from "@testing-library/user-event";
import { afterEach, beforeEach, describe, expect, it, vi } from "vitest";
import { TrainingProvider } from "../api/training";
import { forecastLeft, forecastOf, keepForecast } from "../lib/runForecast";
import { FakeEventSource } from "../test/fakeEventSource";
import { INFO, JOB, mockFetch } from "../test/fixtures";
import { input, mockTrainServer, renderTrain } from "../test/trainServer";
import { LiveScreen } from "./LiveScreen";

const progress = (step: number) => ({
  type: "progress", job_id: "j1", step, total_steps: 100, epoch: 1, loss: 0.5, avg_loss: 0.5,
  lr: 1e-4, grad_norm: 1, samples_per_second: 2.5, peak_memory_gb: 1.5,
}); // fmt: skip

describe("Live: the ETA while a run prepares", () => {
  let mono = 50_000; // performance.now(): the page's monotonic clock
  beforeEach(() => {
    window.sessionStorage.clear();
    vi.spyOn(performance, "now").mockImplementation(() => mono);
  });
  afterEach(() => {
    vi.restoreAllMocks();
    vi.unstubAllGlobals();
  });

  it("keeps the Check's forecast of the run Start started", async () => {
    const calls = mockTrainServer(() => INFO);
    const server = globalThis.fetch as (url: string, init?: RequestInit) => Promise<Response>;
    vi.stubGlobal("fetch", (url: string, init?: RequestInit) => {
      if (url !== "/api/train/start") return server(url, init);
      calls.push({ method: "POST", url, body: null, headers: {} });
      return Promise.resolve(new Response(JSON.stringify({ ...JOB, id: "j9", status: "queued" }), { status: 201, headers: { "Content-Type": "application/json" } }));
    });
    renderTrain();
    await waitFor(() => expect(input("lora_rank")).toHaveValue("32"));
    await userEvent.click(screen.getByRole("button", { name: "Check" }));
    expect(await screen.findByTestId("preflight-time")).toHaveTextContent("12m 34s");
    await userEvent.click(screen.getByRole("button", { name: "Start training" }));
    await waitFor(() => expect(forecastOf("j9")).toEqual({ total_s: 754, confidence: "measured" }));
  });

  it("shows what is left of the forecast, labelled, until two steps measure a pace", async () => {
    keepForecast("j1", { total_s: 130, confidence: "measured", source: "history", runs: 2, note: "", phases: [] });
    expect(forecastLeft(forecastOf("j1"), 200)).toBe(0); // past it: no negative time
    expect(forecastOf("other")).toBeNull();
    vi.stubGlobal("EventSource", FakeEventSource);
    mockFetch(({ url }) => {
      if (url.startsWith("/api/train/status"))
        return { body: { job: { ...JOB, status: "preparing", steps_run: 0, metrics: [], elapsed_s: 10 }, queue: [], busy: true, event_seq: 1 } };
      if (url.includes("/samples")) return { body: { samples: [] } };
      return undefined;
    });
    render(
      <TrainingProvider>
        <LiveScreen />
      </TrainingProvider>,
    );
    await waitFor(() => expect(screen.getByTestId("stat-eta")).toHaveTextContent("2m 00s forecast"));
    act(() => FakeEventSource.last?.emit("progress", progress(2)));
    mono += 4_000;
    act(() => FakeEventSource.last?.emit("progress", progress(10))); // 0.5 s a step, 90 steps left
    expect(screen.getByTestId("stat-eta")).toHaveTextContent("45s");
    expect(screen.getByTestId("stat-eta")).not.toHaveTextContent("forecast");
  });
});
