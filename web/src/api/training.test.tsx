import { act, render, screen, waitFor, within } from "@testing-library/react";
import { afterEach, beforeEach, describe, expect, it, vi } from "vitest";
import { LiveScreen } from "../screens/LiveScreen";
import { JOB, mockFetch, type Call } from "../test/fixtures";
import { TrainingProvider } from "./training";
import { FakeEventSource } from "../test/fakeEventSource";

const progress = (step: number) => ({
  type: "progress",
  job_id: "j1",
  step,
  total_steps: 10,
  epoch: 1,
  loss: 1 / step,
  avg_loss: 0.5,
  lr: 1e-4,
  grad_norm: 1,
  samples_per_second: 2.5,
  peak_memory_gb: 1.5,
});

/** Let the effects and fetches a render started finish (their promises resolve in later ticks). */
async function settle(): Promise<void> {
  await act(async () => {
    await new Promise((resolve) => setTimeout(resolve, 50));
  });
}

describe("live training state", () => {
  let calls: Call[];
  beforeEach(() => {
    vi.stubGlobal("EventSource", FakeEventSource);
    calls = mockFetch(({ url, method }) => {
      if (url.startsWith("/api/train/status")) return { body: { job: JOB, queue: [{ id: "j2", output_name: "next-one" }], busy: true, event_seq: 3 } };
      if (method === "POST" && url === "/api/train/stop") return { body: { ...JOB, status: "stopping" } };
      return undefined;
    });
  });
  afterEach(() => vi.unstubAllGlobals());

  it("appends a chart point per progress event without re-fetching", async () => {
    render(
      <TrainingProvider>
        <LiveScreen />
      </TrainingProvider>,
    );
    await waitFor(() => expect(screen.getByTestId("chart").dataset.points).toBe("1"));
    expect(screen.getByText("next-one")).toBeInTheDocument();
    await settle(); // the mount's own fetches (e.g. the stored sample rounds) land first
    const fetchesBefore = calls.length;
    act(() => {
      for (let s = 2; s <= 6; s++) FakeEventSource.last?.emit("progress", progress(s));
    });
    expect(screen.getByTestId("chart").dataset.points).toBe("6");
    expect(screen.getByTestId("stat-step")).toHaveTextContent("6 / 10");
    expect(calls.length).toBe(fetchesBefore);
    // a status change re-fetches the small snapshot with only new points
    act(() => FakeEventSource.last?.emit("status", { type: "status", job_id: "j1", status: "stopping", error: null }));
    await waitFor(() => expect(calls.length).toBe(fetchesBefore + 1));
    expect(calls[calls.length - 1].url).toBe("/api/train/status?since=6");
  });

  it("charts each validation event beside the loss and shows the latest and best, without re-fetching", async () => {
    render(
      <TrainingProvider>
        <LiveScreen />
      </TrainingProvider>,
    );
    await waitFor(() => expect(screen.getByTestId("chart").dataset.points).toBe("1"));
    await settle();
    const fetchesBefore = calls.length;
    const round = (step: number, loss: number, best: number) => ({
      type: "validation", job_id: "j1", step, loss, images: 2, best_step: best, best_loss: loss,
    });
    act(() => {
      FakeEventSource.last?.emit("progress", progress(2));
      FakeEventSource.last?.emit("validation", round(2, 0.25, 2));
      FakeEventSource.last?.emit("progress", progress(3));
      FakeEventSource.last?.emit("progress", progress(4));
      FakeEventSource.last?.emit("validation", round(4, 0.5, 2));
    });
    expect(screen.getByTestId("chart").dataset.points).toBe("4");
    const val = screen.getByTestId("chart").querySelector('path[data-series="val loss"]');
    expect(val?.getAttribute("d")?.match(/[ML]/g)).toEqual(["M", "L"]); // steps 2 and 4, joined
    expect(screen.getByTestId("stat-val-loss")).toHaveTextContent("0.5");
    expect(screen.getByTestId("stat-val-loss")).toHaveTextContent("best 0.25");
    expect(calls.length).toBe(fetchesBefore);
  });

  it("a snapshot asked with since keeps the validation rounds shown before it (RELIABILITY 1294)", async () => {
    // the server answers `?since=N` with the rounds from step N on only (a long run's poll no longer
    // carries all of them); the rounds the page showed stay on its chart
    calls = mockFetch(({ url }) => {
      if (url === "/api/train/status") return { body: { job: { ...JOB, validation: [{ step: 1, loss: 0.25 }] }, queue: [], busy: true, event_seq: 3 } };
      if (url.startsWith("/api/train/status?since=")) return { body: { job: { ...JOB, status: "stopping", metrics: [], validation: [{ step: 4, loss: 0.5 }] }, queue: [], busy: true, event_seq: 9 } };
      return undefined;
    });
    render(
      <TrainingProvider>
        <LiveScreen />
      </TrainingProvider>,
    );
    await waitFor(() => expect(screen.getByTestId("chart").dataset.points).toBe("1"));
    await settle();
    act(() => {
      for (let s = 2; s <= 4; s++) FakeEventSource.last?.emit("progress", progress(s));
    });
    act(() => FakeEventSource.last?.emit("status", { type: "status", job_id: "j1", status: "stopping", error: null }));
    await waitFor(() => expect(calls.some((c) => c.url === "/api/train/status?since=4")).toBe(true));
    await settle();
    const val = screen.getByTestId("chart").querySelector('path[data-series="val loss"]');
    expect(val?.getAttribute("d")?.match(/[ML]/g)).toEqual(["M", "L"]); // steps 1 and 4 (old: step 4 alone)
    expect(screen.getByTestId("stat-val-loss")).toHaveTextContent("best 0.25");
  });

  it("the Stop dialog closes by itself when the run ends while it is open (no Stop and discard of a finished run)", async () => {
    let done = false;
    calls = mockFetch(({ url }) => {
      if (url.startsWith("/api/train/status")) {
        const job = done ? { ...JOB, status: "completed", finished_at: "2025-01-01T00:01:00Z", lora_path: "/o/shapes-lora.safetensors" } : JOB;
        return { body: { job, queue: [], busy: !done, event_seq: 3 } };
      }
      return undefined;
    });
    render(
      <TrainingProvider>
        <LiveScreen />
      </TrainingProvider>,
    );
    const stop = await screen.findByRole("button", { name: "Stop" });
    act(() => stop.click());
    expect(screen.getByRole("dialog")).toBeInTheDocument();
    done = true;
    act(() => FakeEventSource.last?.emit("complete", { type: "complete", job_id: "j1", lora_path: "/o/shapes-lora.safetensors" }));
    await waitFor(() => expect(screen.queryByRole("dialog")).toBeNull());
    expect(calls.some((c) => c.url === "/api/train/stop")).toBe(false);
  });

  it("the Stop button opens the dialog; Stop and save posts save=true", async () => {
    render(
      <TrainingProvider>
        <LiveScreen />
      </TrainingProvider>,
    );
    const stop = await screen.findByRole("button", { name: "Stop" });
    act(() => stop.click());
    act(() => screen.getByRole("button", { name: "Stop and save" }).click());
    await waitFor(() => expect(calls.some((c) => c.url === "/api/train/stop")).toBe(true));
    expect(calls.find((c) => c.url === "/api/train/stop")?.body).toEqual({ save: true, job_id: "j1" });
  });
  it("shows the plan a plan_chosen event reports in one line, with fallbacks and measured trials", async () => {
    render(
      <TrainingProvider>
        <LiveScreen />
      </TrainingProvider>,
    );
    await waitFor(() => expect(screen.getByTestId("chart").dataset.points).toBe("1"));
    expect(screen.queryByTestId("plan")).toBeNull(); // nothing reported yet
    await settle(); // the mount's own fetches (e.g. the stored sample rounds) land first
    const fetchesBefore = calls.length;
    const trial = { base_precision: "bf16", offload_blocks: 0, micro_batch_size: 1, note: null };
    act(() =>
      FakeEventSource.last?.emit("plan_chosen", {
        type: "plan_chosen",
        job_id: "j1",
        base_precision: "bf16",
        gradient_checkpointing: "selective",
        offload_blocks: 0,
        micro_batch_size: 1,
        compile: true,
        attention_backend: "cudnn",
        memory_budget_gb: 24,
        decided_by: "measured",
        trials: [
          { ...trial, gradient_checkpointing: "off", seconds_per_sample: null, peak_memory_gb: null, fits: false, note: "out of memory" },
          { ...trial, gradient_checkpointing: "selective", seconds_per_sample: 0.25, peak_memory_gb: 21.5, fits: true },
        ],
        fallbacks: ["fp8: needs a GPU of compute capability 8.9"],
      }),
    );
    expect(screen.getByTestId("plan-line")).toHaveTextContent(
      "bf16 · checkpointing selective · 0 blocks offloaded · micro-batch 1 · compiled · attention cudnn",
    );
    expect(screen.getByTestId("plan")).toHaveTextContent("measured for a 24.0 GB budget (2 trials)");
    expect(screen.getByTestId("plan-fallbacks")).toHaveTextContent("fp8: needs a GPU of compute capability 8.9");
    const rows = within(screen.getByTestId("plan-trials")).getAllByRole("row").slice(1);
    expect(rows.map((r) => r.textContent)).toEqual([
      expect.stringMatching(/off.*does not fit.*out of memory/),
      expect.stringMatching(/selective.*0\.25.*21\.5 GB.*chosen/),
    ]);
    expect(calls.length).toBe(fetchesBefore); // folded in place, no re-fetch
  });

  it("shows a plan fixed by the settings without a trials table", async () => {
    calls = mockFetch(({ url }) => {
      const plan = { type: "plan_chosen", base_precision: "fp32", gradient_checkpointing: "off", offload_blocks: 0, micro_batch_size: 2, compile: false, attention_backend: "math", memory_budget_gb: null, decided_by: "settings", trials: [], fallbacks: [] };
      if (url.startsWith("/api/train/status")) return { body: { job: { ...JOB, plan }, queue: [], busy: true, event_seq: 3 } };
      return undefined;
    });
    render(
      <TrainingProvider>
        <LiveScreen />
      </TrainingProvider>,
    );
    expect(await screen.findByTestId("plan-line")).toHaveTextContent("fp32 · checkpointing off · 0 blocks offloaded · micro-batch 2 · not compiled · attention math");
    expect(screen.getByTestId("plan")).toHaveTextContent("fixed by the settings");
    expect(screen.queryByTestId("plan-trials")).toBeNull();
    expect(screen.queryByTestId("plan-fallbacks")).toBeNull();
  });

  it("after the stream drops and comes back, shows the job as the server now has it (the server restarted: its record)", async () => {
    let restarted = false;
    calls = mockFetch(({ url }) => {
      if (url.startsWith("/api/train/status")) {
        return { body: restarted ? { job: null, queue: [], busy: false, event_seq: 0 } : { job: JOB, queue: [], busy: true, event_seq: 3 } };
      }
      if (url === "/api/runs/j1") {
        return {
          body: { id: "j1", output_name: "shapes-lora", family: "flux", status: "interrupted", created_at: JOB.created_at, started_at: JOB.started_at,
            finished_at: "2025-01-01T00:05:00Z", steps_run: 6, total_steps: 10, last_loss: 0.2, error: "the server stopped during this run",
            config: {}, metrics: [], validation: [], outputs: [] },
        };
      }
      return undefined;
    });
    render(
      <TrainingProvider>
        <LiveScreen />
      </TrainingProvider>,
    );
    await screen.findByRole("button", { name: "Stop" });
    act(() => FakeEventSource.last?.onopen?.());
    act(() => FakeEventSource.last?.emit("progress", progress(6)));
    act(() => FakeEventSource.last?.onerror?.()); // the server goes away mid-run
    restarted = true;
    act(() => FakeEventSource.last?.onopen?.()); // and is back, with no job of its life
    expect(await screen.findByText("the server stopped during this run")).toBeInTheDocument();
    expect(screen.getByText("interrupted")).toBeInTheDocument();
    expect(screen.queryByRole("button", { name: "Stop" })).toBeNull();
    expect(screen.getByTestId("stat-step")).toHaveTextContent("6 / 10");
  });
});
