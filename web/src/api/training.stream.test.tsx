/**
 * The event stream and the status snapshot under changes (RELIABILITY 158): one stream at a time
 * after the token changes, no event of a closed stream applied, a stream the server closed for
 * good reopened once, and status answers arriving out of order never bring back an older state.
 */
import { act, render, screen, waitFor } from "@testing-library/react";
import { afterEach, beforeEach, describe, expect, it, vi } from "vitest";
import { LiveScreen } from "../screens/LiveScreen";
import { JOB, deferFetch } from "../test/fixtures";
import { resetAuthForTests, setToken } from "./auth";
import { TrainingProvider, useTraining } from "./training";

/** An EventSource double that keeps every instance (open or closed) and its readyState. */
class Stream {
  static all: Stream[] = [];
  listeners = new Map<string, ((e: MessageEvent) => void)[]>();
  onopen: (() => void) | null = null;
  onerror: (() => void) | null = null;
  onmessage: ((e: MessageEvent) => void) | null = null;
  readyState = 0;
  closed = false;
  constructor(public url: string) {
    Stream.all.push(this);
  }
  addEventListener(type: string, fn: (e: MessageEvent) => void) {
    this.listeners.set(type, [...(this.listeners.get(type) ?? []), fn]);
  }
  close() {
    this.closed = true;
    this.readyState = 2;
  }
  /** Deliver an event as a browser whose task was queued before close() might. */
  emit(type: string, data: object) {
    const e = new MessageEvent(type, { data: JSON.stringify(data) });
    for (const fn of this.listeners.get(type) ?? []) fn(e);
  }
}

const open = () => Stream.all.filter((s) => !s.closed);

const status = (job: object) => ({ job, queue: [], busy: true, event_seq: 3 });
const progress = (step: number) => ({ type: "progress", job_id: "j1", step, total_steps: 10, epoch: 1, loss: 0.5, avg_loss: 0.5, lr: 1e-4, grad_norm: 1, samples_per_second: 2, peak_memory_gb: 1 });

let refresh: () => Promise<void> = async () => undefined;
function Probe() {
  refresh = useTraining().refresh;
  return null;
}
const view = () => (
  <TrainingProvider>
    <Probe />
    <LiveScreen />
  </TrainingProvider>
);

describe("the event stream", () => {
  beforeEach(() => {
    window.localStorage.clear();
    resetAuthForTests();
    Stream.all = [];
    vi.stubGlobal("EventSource", Stream);
  });
  afterEach(() => {
    vi.unstubAllGlobals();
    window.localStorage.clear();
    resetAuthForTests();
  });

  it("a new token closes the stream and opens one; an event of the closed stream is not applied", async () => {
    deferFetch(({ url }) => (url.startsWith("/api/train/status") ? { body: status(JOB) } : { status: 404, body: { detail: "none" } }));
    render(view());
    await screen.findByRole("button", { name: "Stop" });
    const old = Stream.all[0];
    act(() => old.emit("progress", progress(3)));
    expect(screen.getByTestId("stat-step")).toHaveTextContent("3 / 10");
    act(() => setToken("new-token"));
    expect(old.closed).toBe(true);
    expect(open()).toHaveLength(1);
    expect(open()[0].url).toBe("/api/train/events?token=new-token");
    act(() => old.emit("progress", progress(7))); // queued before the close: dropped
    expect(screen.getByTestId("stat-step")).toHaveTextContent("3 / 10");
    act(() => open()[0].emit("progress", progress(4)));
    expect(screen.getByTestId("stat-step")).toHaveTextContent("4 / 10");
  });

  it("a stream the server closed for good (an error status while it restarted) is reopened once", async () => {
    const { calls } = deferFetch(({ url }) => (url.startsWith("/api/train/status") ? { body: status(JOB) } : { status: 404, body: { detail: "none" } }));
    render(view());
    await screen.findByRole("button", { name: "Stop" });
    const first = Stream.all[0];
    const asked = calls.length;
    act(() => {
      first.readyState = 2; // the browser gave up on it
      first.onerror?.();
    });
    expect(screen.getByText("reconnecting…")).toBeInTheDocument();
    await waitFor(() => expect(calls.length).toBe(asked + 1)); // the status is asked now (a 401 would ask for the token)
    await waitFor(() => expect(Stream.all).toHaveLength(2), { timeout: 5000 });
    expect(open()).toEqual([Stream.all[1]]);
    act(() => Stream.all[1].onopen?.());
    expect(screen.queryByText("reconnecting…")).toBeNull();
  });

  it("a status answer older than one already applied does not bring back the older state", async () => {
    const { held } = deferFetch();
    render(view());
    await act(async () => held(/^\/api\/train\/status/).answer(status(JOB)));
    await screen.findByRole("button", { name: "Stop" });
    act(() => {
      void refresh(); // e.g. a "status" event...
      void refresh(); // ...and a "complete" right after it
    });
    const older = held(/^\/api\/train\/status/);
    const newer = held(/^\/api\/train\/status/);
    await act(async () => newer.answer(status({ ...JOB, status: "completed", finished_at: "2025-01-01T00:09:00Z" })));
    expect(await screen.findByText("completed")).toBeInTheDocument();
    await act(async () => older.answer(status(JOB)));
    expect(screen.getByText("completed")).toBeInTheDocument();
    expect(screen.queryByRole("button", { name: "Stop" })).toBeNull();
  });

  it("the run's decode scan shows its count in the banner while the job prepares (RELIABILITY 170)", async () => {
    deferFetch(({ url }) =>
      url.startsWith("/api/train/status") ? { body: status({ ...JOB, status: "preparing", metrics: [], steps_run: 0 }) } : { status: 404, body: { detail: "none" } },
    );
    render(view());
    await screen.findByRole("button", { name: "Stop" });
    const decoding = (done: number, total: number) => ({ type: "preparing", job_id: "j1", phase: "decoding", done, total });
    act(() => open()[0].emit("preparing", decoding(0, 240)));
    expect(screen.getByText("Decoding new images (every pixel, once, before the models load): 0/240")).toBeInTheDocument();
    act(() => open()[0].emit("preparing", decoding(120, 280)));
    expect(screen.getByText("Decoding new images (every pixel, once, before the models load): 120/280")).toBeInTheDocument();
  });
});
