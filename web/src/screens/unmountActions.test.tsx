/**
 * A screen's own POSTs whose effect must stand (Start, Stop, Resume, Train longer), answered after
 * the screen unmounted (the user opened another one meanwhile): the request went out and is not
 * aborted (a Start sent stays started), but its answer lands nowhere: no jump to Live, no callback
 * of a parent gone, no status refresh, no console error.
 */
import { act, render, screen, waitFor } from "@testing-library/react";
import userEvent from "@testing-library/user-event";
import { afterEach, beforeEach, describe, expect, it, vi } from "vitest";
import { TrainingProvider } from "../api/training";
import { ResumeButton } from "../components/ResumeButton";
import { TrainLonger } from "../components/TrainLonger";
import { loadDraft } from "../lib/draft";
import { forgetGeneration, inFlight } from "../lib/generationInFlight";
import { deferFetch, galleryImage, INFO, JOB, stoppedRun } from "../test/fixtures";
import { renderWithProviders } from "../test/render";
import { GenerateScreen } from "./GenerateScreen";
import { input, mockTrainServer, renderTrain } from "../test/trainServer";
import { LiveScreen } from "./LiveScreen";
import { FakeEventSource } from "../test/fakeEventSource";

const RUN = stoppedRun({ train_longer: { from_step: 100, steps: 1000 } });

/** Long enough for an answer's promise chain (all microtasks here) to have run out. */
const settle = () => act(() => new Promise((r) => setTimeout(r, 50)));

let errors: ReturnType<typeof vi.spyOn>;
beforeEach(() => {
  errors = vi.spyOn(console, "error");
  window.location.hash = "#/train";
});
afterEach(() => {
  vi.unstubAllGlobals();
  vi.restoreAllMocks();
  window.location.hash = "";
});

describe("a screen's POST answered after it unmounted", () => {
  it("Start: the run was asked for, the draft is used up, but the app does not jump to Live", async () => {
    mockTrainServer(() => INFO);
    const server = globalThis.fetch as (url: string, init?: RequestInit) => Promise<Response>;
    let answer: () => void = () => undefined;
    let aborted = false;
    vi.stubGlobal("fetch", (url: string, init?: RequestInit) => {
      if (url !== "/api/train/start") return server(url, init);
      init?.signal?.addEventListener("abort", () => (aborted = true));
      return new Promise<Response>((resolve) => {
        answer = () => resolve(new Response(JSON.stringify({ ...JOB, status: "queued" }), { status: 201 }));
      });
    });
    const train = renderTrain();
    await waitFor(() => expect(input("lora_rank")).toHaveValue("32"));
    await userEvent.clear(input("lora_rank"));
    await userEvent.type(input("lora_rank"), "8"); // edited: kept as the draft
    await userEvent.click(screen.getByRole("button", { name: "Start training" }));
    await waitFor(() => expect(screen.getByRole("button", { name: "Starting…" })).toBeDisabled());
    train.unmount(); // the user opened another screen before the answer
    window.location.hash = "#/datasets";
    await act(async () => answer());
    await settle();
    expect(aborted).toBe(false); // the request itself stands
    expect(window.location.hash).toBe("#/datasets");
    expect(loadDraft("train")).toBeNull(); // a run started from it: the next visit is a fresh form
    expect(errors).not.toHaveBeenCalled();
  });

  it("Stop: the stop stands, the status is not refreshed for a screen gone", async () => {
    vi.stubGlobal("EventSource", FakeEventSource);
    const { calls, held } = deferFetch(({ url }) =>
      url.startsWith("/api/train/status") ? { body: { job: JOB, queue: [], busy: true, event_seq: 1 } } : url.includes("/samples") ? { body: { samples: [] } } : undefined,
    );
    const Shell = ({ live }: { live: boolean }) => <TrainingProvider>{live ? <LiveScreen /> : <p>elsewhere</p>}</TrainingProvider>;
    const { rerender } = render(<Shell live />);
    await userEvent.click(await screen.findByRole("button", { name: "Stop" }));
    await userEvent.click(screen.getByRole("button", { name: /Stop and save/ }));
    const stop = held("/api/train/stop");
    rerender(<Shell live={false} />); // Live left before the stop's answer
    const before = calls.filter((c) => c.url.startsWith("/api/train/status")).length;
    await act(async () => stop.answer({ ...JOB, status: "stopping" }));
    await settle();
    expect(stop.aborted).toBe(false);
    expect(calls.filter((c) => c.url.startsWith("/api/train/status")).length).toBe(before);
    expect(errors).not.toHaveBeenCalled();
  });

  it("Resume: the run resumes, the parent gone is not called back (no jump to Live)", async () => {
    const { held } = deferFetch();
    const onResumed = vi.fn();
    const onError = vi.fn();
    const view = render(<ResumeButton run={RUN} onResumed={onResumed} onError={onError} />);
    await userEvent.click(screen.getByRole("button", { name: "Resume from 100: portrait" }));
    const resume = held("/api/runs/abc123/resume");
    view.unmount();
    await act(async () => resume.answer({ ...JOB, status: "queued" }, 201));
    await settle();
    expect(resume.aborted).toBe(false);
    expect(onResumed).not.toHaveBeenCalled();
    expect(onError).not.toHaveBeenCalled();
    expect(errors).not.toHaveBeenCalled();
  });

  it("Generate: the image is made, the screen gone does not reload its gallery for it", async () => {
    forgetGeneration();
    const { calls, held } = deferFetch(({ method, url }) => {
      if (url === "/api/info") return { body: INFO };
      if (url.startsWith("/api/train/status")) return { body: { job: null, queue: [], busy: false, event_seq: 0 } };
      if (url.startsWith("/api/loras")) return { body: { root: "/o", loras: [] } };
      if (url === "/api/gallery") return { body: { images: [galleryImage([])] } };
      return method === "POST" && url === "/api/generations" ? undefined : { status: 404, body: { detail: "not found" } };
    });
    const view = renderWithProviders(<GenerateScreen />);
    await screen.findByTestId("gallery");
    await userEvent.click(screen.getByRole("button", { name: "Generate" }));
    const generate = held("/api/generations");
    view.unmount(); // another screen opened while it renders
    const galleries = calls.filter((c) => c.url === "/api/gallery").length;
    const made = { file: "new.png", url: "/gallery/new.png", path: "/g/new.png", seconds: 1.5, seed: 3, width: 64, height: 64, prompt: "p", loras: [] };
    await act(async () => generate.answer(made, 201));
    await settle();
    expect(generate.aborted).toBe(false);
    expect(inFlight()).toBeNull(); // the flight ended (a Generate screen opened now shows the gallery with its image)
    expect(calls.filter((c) => c.url === "/api/gallery").length).toBe(galleries);
    expect(errors).not.toHaveBeenCalled();
  });

  it("Train longer: its refusal is not said by a parent gone either", async () => {
    const { held } = deferFetch();
    const onStarted = vi.fn();
    const onError = vi.fn();
    const view = render(<TrainLonger run={RUN} onStarted={onStarted} onError={onError} />);
    await userEvent.click(screen.getByRole("button", { name: "Train longer: portrait" }));
    await userEvent.click(screen.getByRole("button", { name: "Train to 2000 steps" }));
    const resume = held("/api/runs/abc123/resume");
    view.unmount();
    await act(async () => resume.answer({ detail: "a job is running" }, 409));
    await settle();
    expect(resume.aborted).toBe(false);
    expect(onStarted).not.toHaveBeenCalled();
    expect(onError).not.toHaveBeenCalled();
    expect(errors).not.toHaveBeenCalled();
  });
});
