/**
 * The event stream and the status snapshot under changes (RELIABILITY 158): one stream at a time
 * after the token changes, no event of a closed stream applied, a stream the server closed for
 * good reopened once, and status answers arriving out of order never bring back an older state:
 * not one applied before (RELIABILITY 158), not the events applied meanwhile (RELIABILITY 195).
 */
import { act, render, screen, waitFor } from "@testing-library/react";
import { afterEach, beforeEach, describe, expect, it, vi } from "vitest";
import { LiveScreen } from "../screens/LiveScreen";
import { JOB, deferFetch } from "../test/fixtures";
import { resetAuthForTests, setToken } from "./auth";
import { REOPEN_MS, TrainingProvider, useTraining } from "./training";

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
  /** Deliver an event as a browser whose task was queued before close() might; `id`: its `id:` line. */
  emit(type: string, data: object, id?: number) {
    const e = new MessageEvent(type, { data: JSON.stringify(data), lastEventId: id == null ? "" : String(id) });
    for (const fn of this.listeners.get(type) ?? []) fn(e);
  }
}

const open = () => Stream.all.filter((s) => !s.closed);

/** The reopen's wait (REOPEN_MS and up) kept for the test to run (not 3 real seconds; suitetime8); the waits asked, in `waits`. */
function heldReopens(): { waits: number[]; reopen: () => void } {
  const waits: number[] = [];
  const due: (() => void)[] = [];
  const real = window.setTimeout.bind(window);
  vi.spyOn(window, "setTimeout").mockImplementation(((fn: () => void, ms?: number) => {
    if ((ms ?? 0) < REOPEN_MS) return real(fn, ms);
    waits.push(ms as number);
    due.push(fn);
    return 0;
  }) as typeof window.setTimeout);
  return { waits, reopen: () => act(() => due.shift()?.()) };
}

const status = (job: object, event_seq = 3, queue: object[] = []) => ({ job, queue, busy: true, event_seq });
const progress = (step: number, job_id = "j1") => ({ type: "progress", job_id, step, total_steps: 10, epoch: 1, loss: step / 100, avg_loss: 0.5, lr: 1e-4, grad_norm: 1, samples_per_second: 2, peak_memory_gb: 1 });
const samples = (step: number) => ({ type: "sample_ready", job_id: "j1", step, images: [`samples/step-${step}-0.png`] });

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
    vi.restoreAllMocks();
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
    // opened once the new token's browser session is (its cookie stands for the token: no ?token=)
    await waitFor(() => expect(open()).toHaveLength(1));
    expect(open()[0].url).toBe("/api/train/events");
    const shown = screen.getByTestId("stat-step").textContent; // (the status asked again may have come)
    act(() => old.emit("progress", progress(7))); // queued before the close: dropped
    expect(screen.getByTestId("stat-step").textContent).toBe(shown);
    expect(shown).not.toContain("7 / 10");
    act(() => open()[0].emit("progress", progress(4)));
    expect(screen.getByTestId("stat-step")).toHaveTextContent("4 / 10");
  });

  it("a stream the server closed for good (an error status while it restarted) is reopened once", async () => {
    const held = heldReopens();
    const { calls } = deferFetch(({ url }) => (url.startsWith("/api/train/status") ? { body: status(JOB) } : { status: 404, body: { detail: "none" } }));
    render(view());
    await screen.findByRole("button", { name: "Stop" });
    const first = Stream.all[0];
    const asked = calls.length;
    act(() => {
      first.readyState = 2; // the browser gave up on it
      first.onerror?.();
    });
    expect(screen.getByText("reconnecting in 3 s…")).toBeInTheDocument();
    // the status is asked now (a 401 would ask for the token); on a loaded host the reopened
    // stream's own status ask may already have followed it, so count the asks, not the calls
    await waitFor(() => expect(calls.slice(asked).some((c) => c.url.startsWith("/api/train/status"))).toBe(true));
    expect(held.waits).toEqual([REOPEN_MS]);
    held.reopen();
    await waitFor(() => expect(Stream.all).toHaveLength(2));
    expect(open()).toEqual([Stream.all[1]]);
    act(() => Stream.all[1].onopen?.());
    expect(screen.queryByText("reconnecting…")).toBeNull();
  });

  it("tells a screen reader that the live updates stopped and came back, not the countdown (RELIABILITY 1913)", async () => {
    const held = heldReopens();
    deferFetch(({ url }) => (url.startsWith("/api/train/status") ? { body: status(JOB) } : { status: 404, body: { detail: "none" } }));
    render(view());
    await screen.findByRole("button", { name: "Stop" });
    const said = screen.getByTestId("connection-announcement");
    expect(said).toHaveAttribute("role", "status");
    expect(said).toHaveTextContent(/^$/); // opening: nothing lost yet
    act(() => Stream.all[0].onopen?.());
    expect(said).toHaveTextContent(/^$/);
    act(() => {
      Stream.all[0].readyState = 2;
      Stream.all[0].onerror?.();
    });
    expect(screen.getByText("reconnecting in 3 s…")).toBeInTheDocument();
    expect(said).toHaveTextContent(/^Live updates lost: reconnecting…$/);
    held.reopen();
    await waitFor(() => expect(Stream.all).toHaveLength(2));
    act(() => Stream.all[1].onopen?.());
    expect(said).toHaveTextContent(/^Live updates back\.$/);
  });

  it("streams closed for good in a row are reopened after 3, 6, 12... s up to 60 s, and it says so (RELIABILITY 1770)", async () => {
    deferFetch(({ url }) => (url.startsWith("/api/train/status") ? { body: status(JOB) } : { status: 404, body: { detail: "none" } }));
    const waits: number[] = [];
    const reopen: (() => void)[] = [];
    const real = window.setTimeout.bind(window);
    vi.spyOn(window, "setTimeout").mockImplementation(((fn: () => void, ms?: number) => {
      if ((ms ?? 0) < REOPEN_MS) return real(fn, ms);
      waits.push(ms as number);
      reopen.push(fn);
      return 0;
    }) as typeof window.setTimeout);
    render(view());
    await screen.findByRole("button", { name: "Stop" });
    const refuse = async (n: number) => {
      const s = Stream.all[n];
      act(() => {
        s.readyState = 2; // a 429 / 503 past the server's stream caps: the browser gives up on it
        s.onerror?.();
      });
      expect(screen.getByText(`reconnecting in ${waits[waits.length - 1] / 1000} s…`)).toBeInTheDocument();
      act(() => reopen.shift()?.());
      await waitFor(() => expect(Stream.all).toHaveLength(n + 2));
    };
    for (let n = 0; n < 7; n++) await refuse(n);
    expect(waits).toEqual([3000, 6000, 12000, 24000, 48000, 60000, 60000]);
    act(() => Stream.all[7].onopen?.());
    expect(screen.queryByText(/reconnecting/)).toBeNull();
    await refuse(7);
    expect(waits[7]).toBe(REOPEN_MS); // one that opened starts the count again
  });

  it("the wait before a stream is reopened counts down each second (RELIABILITY 1841)", async () => {
    deferFetch(({ url }) => (url.startsWith("/api/train/status") ? { body: status(JOB) } : { status: 404, body: { detail: "none" } }));
    const ticks: (() => void)[] = [];
    vi.spyOn(window, "setInterval").mockImplementation(((fn: () => void, ms?: number) => {
      if (ms === 1000) ticks.push(fn);
      return ticks.length;
    }) as typeof window.setInterval);
    const real = window.setTimeout.bind(window);
    vi.spyOn(window, "setTimeout").mockImplementation(((fn: () => void, ms?: number) =>
      (ms ?? 0) < REOPEN_MS ? real(fn, ms) : 0) as typeof window.setTimeout); // the reopen itself never comes
    render(view());
    await screen.findByRole("button", { name: "Stop" });
    const before = ticks.length; // the screen's own second tickers (elapsed time)
    act(() => {
      Stream.all[0].readyState = 2;
      Stream.all[0].onerror?.();
    });
    expect(screen.getByText("reconnecting in 3 s…")).toBeInTheDocument();
    const tick = ticks[before]; // the old code set none: "in 3 s" stayed until the reopen
    expect(tick).toBeDefined();
    act(() => tick());
    expect(screen.getByText("reconnecting in 2 s…")).toBeInTheDocument();
    act(() => tick());
    act(() => tick());
    expect(screen.getByText("reconnecting in 1 s…")).toBeInTheDocument(); // never 0 or below
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

  it("a status answer fetched before a burst of events and answered after them shows neither an older step nor older samples", async () => {
    const { held } = deferFetch();
    render(view());
    await act(async () => held(/^\/api\/train\/status/).answer(status(JOB, 3)));
    await screen.findByRole("button", { name: "Stop" });
    const es = Stream.all[0];
    act(() => es.emit("status", { type: "status", job_id: "j1", status: "stopping", error: null }, 4)); // re-fetches the snapshot
    act(() => {
      es.emit("progress", progress(5), 5);
      es.emit("sample_ready", samples(5), 6);
      es.emit("progress", progress(7), 7);
    });
    expect(screen.getByTestId("stat-step")).toHaveTextContent("7 / 10");
    expect(screen.getByTestId("samples-step-5")).toBeInTheDocument();
    // taken after event 4, answered after event 7: step 4, the samples of step 2
    const stale = { ...JOB, status: "stopping", steps_run: 4, progress: progress(4), samples: { step: 2, images: ["samples/step-2-0.png"] } };
    await act(async () => held(/^\/api\/train\/status/).answer(status(stale, 4, [{ id: "q1", output_name: "next-lora" }])));
    expect(await screen.findByText("next-lora")).toBeInTheDocument(); // what only the snapshot says is applied
    expect(screen.getByText("stopping")).toBeInTheDocument();
    expect(screen.getByTestId("stat-step")).toHaveTextContent("7 / 10");
    expect(screen.getByText("0.07")).toBeInTheDocument(); // the loss of step 7, not of step 4
    expect(screen.getByTestId("samples-step-5")).toBeInTheDocument();
    expect(screen.queryByTestId("samples-step-2")).toBeNull();
    act(() => es.emit("progress", progress(8), 8));
    expect(screen.getByTestId("stat-step")).toHaveTextContent("8 / 10");
  });

  it("after a server restart (event ids start again at 1) a snapshot of the new life is brought up to its own events only", async () => {
    const { held } = deferFetch();
    render(view());
    await act(async () => held(/^\/api\/train\/status/).answer(status(JOB, 50)));
    await screen.findByRole("button", { name: "Stop" });
    const es = Stream.all[0];
    act(() => es.emit("progress", progress(9), 51));
    // the new life: a new job j2, its events numbered from 1 again
    const j2 = { ...JOB, id: "j2", output_name: "second-lora", metrics: [] };
    act(() => es.emit("status", { type: "status", job_id: "j2", status: "running", error: null }, 1));
    act(() => es.emit("progress", progress(2, "j2"), 2));
    await act(async () => held(/^\/api\/train\/status/).answer(status({ ...j2, steps_run: 1, progress: progress(1, "j2") }, 1)));
    expect(await screen.findByText("second-lora")).toBeInTheDocument();
    expect(screen.getByTestId("stat-step")).toHaveTextContent("2 / 10"); // its event 2, not j1's step 9
    act(() => es.emit("progress", progress(3, "j2"), 3));
    expect(screen.getByTestId("stat-step")).toHaveTextContent("3 / 10");
  });

  it("a stream that opens after the first snapshot was taken asks again for what happened in between", async () => {
    const { held } = deferFetch();
    render(view());
    await act(async () => held(/^\/api\/train\/status/).answer(status(JOB, 3)));
    await screen.findByRole("button", { name: "Stop" });
    // the server finished the job (event 4) before the stream's request reached it: the stream
    // starts after event 4 and never carries it
    act(() => Stream.all[0].onopen?.());
    const done = { ...JOB, status: "completed", finished_at: "2025-01-01T00:09:00Z" };
    await act(async () => held(/^\/api\/train\/status/).answer(status(done, 4)));
    expect(await screen.findByText("completed")).toBeInTheDocument();
    expect(screen.queryByRole("button", { name: "Stop" })).toBeNull();
  });

  it("a newer status answer that reflects fewer events than an older one applied before it still gets every event after its own", async () => {
    const { held } = deferFetch();
    render(view());
    await act(async () => held(/^\/api\/train\/status/).answer(status(JOB, 3)));
    await screen.findByRole("button", { name: "Stop" });
    act(() => {
      void refresh();
      void refresh(); // the server answers both in parallel: the newer one read fewer events
    });
    const es = Stream.all[0];
    act(() => {
      es.emit("progress", progress(4), 4);
      es.emit("sample_ready", samples(4), 5);
      es.emit("progress", progress(6), 6);
    });
    const older = held(/^\/api\/train\/status/);
    const newer = held(/^\/api\/train\/status/);
    const at = (step: number) => ({ ...JOB, steps_run: step, progress: progress(step) });
    await act(async () => older.answer(status({ ...at(5), samples: { step: 4, images: ["samples/step-4-0.png"] } }, 5)));
    await act(async () => newer.answer(status(at(4), 4)));
    expect(screen.getByTestId("stat-step")).toHaveTextContent("6 / 10");
    expect(screen.getByTestId("samples-step-4")).toBeInTheDocument(); // event 5, after the newer answer's 4
  });
});
