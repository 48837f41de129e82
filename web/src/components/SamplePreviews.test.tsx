import { act, render, screen, waitFor, within } from "@testing-library/react";
import userEvent from "@testing-library/user-event";
import { afterEach, beforeEach, describe, expect, it, vi } from "vitest";
import { resetAuthForTests, setToken } from "../api/auth";
import { TrainingProvider } from "../api/training";
import { LiveScreen } from "../screens/LiveScreen";
import { RunDetailScreen } from "../screens/RunDetailScreen";
import { type Call, JOB as RUNNING_JOB, mockFetch } from "../test/fixtures";
import { groupByStep, roundTiles, samplePrompts } from "./SamplePreviews";
import { FakeEventSource } from "../test/fakeEventSource";

/** An EventSource double: the test pushes named server-sent events into it. */

const PROMPTS = ["a red circle", "a blue square"];
// the fixtures' running job j1, at step 2 with no metrics yet, sampling PROMPTS
const JOB = { ...RUNNING_JOB, metrics: [], steps_run: 2, stop_requested: null, config: { sample_prompts: PROMPTS }, samples: null };

const sampleReady = (step: number) => ({
  type: "sample_ready",
  job_id: "j1",
  step,
  images: [`samples/step-${String(step).padStart(6, "0")}-0.png`, `samples/step-${String(step).padStart(6, "0")}-1.png`],
});

describe("sample previews", () => {
  afterEach(() => {
    vi.unstubAllGlobals();
    setToken("");
    resetAuthForTests();
  });

  it("builds served URLs (never with the token: the session cookie stands for it) and keeps prompts in order", () => {
    setToken("s3cret");
    const tiles = roundTiles("j 1", ["samples/step-000004-0.png", "samples/step-000004-1.png"], ["only one"]);
    expect(tiles.map((t) => t.url)).toEqual([
      "/api/runs/j%201/samples/step-000004-0.png",
      "/api/runs/j%201/samples/step-000004-1.png",
    ]);
    expect(tiles.map((t) => t.prompt)).toEqual(["only one", null]);
    // a round without prompt 0's file (its image was not finite, RELIABILITY 1651): prompt 1's tile keeps index 1
    const [second] = roundTiles("j1", ["samples/step-000004-1.png"], ["a", "b"]);
    expect([second.index, second.prompt]).toEqual([1, "b"]);
    // an object entry gives its prompt; every entry keeps its index (the round's images are in prompt order)
    expect(samplePrompts({ sample_prompts: ["a", { prompt: "c", seed: 3 }, 3, "b"] })).toEqual(["a", "c", "", "b"]);
    expect(samplePrompts({})).toEqual([]);
  });

  it("groups a run's samples newest step first, each in prompt order", () => {
    const img = (step: number, index: number) => ({
      step,
      index,
      prompt: PROMPTS[index],
      name: `step-${step}-${index}.png`,
      url: `/api/runs/r/samples/step-${step}-${index}.png`,
    });
    const rounds = groupByStep([img(2, 1), img(2, 0), img(4, 0), img(4, 1)]);
    expect(rounds.map((r) => r.step)).toEqual([4, 2]);
    expect(rounds[1].tiles.map((t) => t.index)).toEqual([0, 1]);
  });

  it("LiveScreen shows the latest samples as sample_ready events arrive, without re-fetching", async () => {
    vi.stubGlobal("EventSource", FakeEventSource);
    const calls: Call[] = mockFetch(({ url }) =>
      url.startsWith("/api/train/status") ? { body: { job: JOB, queue: [], busy: true, event_seq: 1 } } : undefined,
    );
    render(
      <TrainingProvider>
        <LiveScreen />
      </TrainingProvider>,
    );
    await screen.findByText("shapes-lora");
    expect(screen.queryByText("Sample previews")).not.toBeInTheDocument();
    // the mount's own fetch of the stored rounds (an effect: under load it can start after the first render is seen)
    await waitFor(() => expect(calls.some((c) => c.url === "/api/runs/j1/samples?limit=20")).toBe(true));
    const fetches = calls.length;
    act(() => FakeEventSource.last?.emit("sample_ready", sampleReady(2)));
    const round = screen.getByTestId("samples-step-2");
    expect(within(round).getByAltText("a red circle")).toHaveAttribute("src", "/api/runs/j1/samples/step-000002-0.png");
    expect(within(round).getByAltText("a blue square")).toHaveAttribute("src", "/api/runs/j1/samples/step-000002-1.png");
    act(() => FakeEventSource.last?.emit("sample_ready", sampleReady(4)));
    expect(screen.queryByTestId("samples-step-2")).not.toBeInTheDocument();
    expect(screen.getByTestId("samples-step-4")).toBeInTheDocument();
    expect(calls.length).toBe(fetches);
  });
  it.each([
    [false, "discards: its previews are deleted, so none is shown and the screen says so"],
    [true, "saves: its previews stay"],
  ])("LiveScreen after a stop that %s (%s)", async (save) => {
    vi.stubGlobal("EventSource", FakeEventSource);
    let job: Record<string, unknown> = JOB;
    mockFetch(({ url }) => {
      if (url.startsWith("/api/train/status")) return { body: { job, queue: [], busy: false, event_seq: 1 } };
      if (url === "/api/runs/j1/samples?limit=20") return { body: { samples: [] } }; // a fresh run's discarded folder is gone
      return undefined;
    });
    render(
      <TrainingProvider>
        <LiveScreen />
      </TrainingProvider>,
    );
    await screen.findByText("shapes-lora");
    act(() => FakeEventSource.last?.emit("sample_ready", sampleReady(2)));
    act(() => FakeEventSource.last?.emit("sample_ready", sampleReady(4)));
    expect(screen.getByTestId("sample-history")).toBeInTheDocument();
    const samples = { step: 4, images: sampleReady(4).images };
    job = { ...JOB, status: "stopped", stop_requested: { save }, samples, lora_path: save ? "/o/shapes-lora.safetensors" : null };
    act(() => FakeEventSource.last?.emit("status", { type: "status", job_id: "j1", status: "stopped", error: null }));
    if (save) {
      await screen.findByText(/LoRA saved/);
      expect(screen.getByTestId("samples-step-4")).toBeInTheDocument();
      expect(screen.getByTestId("sample-history")).toBeInTheDocument();
      expect(screen.queryByTestId("nothing-kept")).toBeNull();
    } else {
      await screen.findByTestId("nothing-kept");
      expect(screen.getByTestId("nothing-kept")).toHaveTextContent("sample previews this run wrote were deleted");
      expect(screen.queryByTestId("samples-step-4")).toBeNull();
      await waitFor(() => expect(screen.queryByTestId("sample-history")).toBeNull());
      expect(document.querySelectorAll("img")).toHaveLength(0); // no link to a deleted file
    }
  });
});

describe("RunDetailScreen samples", () => {
  beforeEach(() => {
    mockFetch(({ url }) => {
      if (url === "/api/runs/r1") {
        return {
          body: {
            id: "r1", output_name: "shapes-lora", family: "flux", status: "completed",
            created_at: "2025-01-01T00:00:00Z", started_at: null, finished_at: null, steps_run: 4, total_steps: 4,
            last_loss: 0.1, error: null, resume_step: null, config: { sample_prompts: PROMPTS }, metrics: [], outputs: [],
          },
        };
      }
      if (url === "/api/runs/r1/samples") {
        const img = (step: number, index: number) => {
          const name = `step-${String(step).padStart(6, "0")}-${index}.png`;
          return { step, index, prompt: PROMPTS[index], name, url: `/api/runs/r1/samples/${name}` };
        };
        return { body: { samples: [img(2, 0), img(2, 1), img(4, 0), img(4, 1)] } };
      }
      return undefined;
    });
  });
  afterEach(() => vi.unstubAllGlobals());

  it("shows every round of the run, newest first", async () => {
    render(<RunDetailScreen id="r1" />);
    await waitFor(() => expect(screen.getByTestId("samples-step-4")).toBeInTheDocument());
    const rounds = screen.getAllByTestId(/^samples-step-/).map((el) => el.dataset.testid);
    expect(rounds).toEqual(["samples-step-4", "samples-step-2"]);
    expect(within(screen.getByTestId("samples-step-2")).getByAltText("a blue square")).toHaveAttribute(
      "src",
      "/api/runs/r1/samples/step-000002-1.png",
    );
  });

  it("shows the newest rounds and adds the older ones on request (RELIABILITY 1341)", async () => {
    const img = (step: number) => ({ step, index: 0, prompt: PROMPTS[0], name: `step-${String(step).padStart(6, "0")}-0.png`, url: `/api/runs/r1/samples/step-${String(step).padStart(6, "0")}-0.png` });
    const run = { id: "r1", output_name: "shapes-lora", family: "flux", status: "completed", created_at: "2025-01-01T00:00:00Z", started_at: null, finished_at: null,
      steps_run: 6, total_steps: 6, last_loss: 0.1, error: null, resume_step: null, config: { sample_prompts: PROMPTS }, metrics: [], outputs: [] }; // prettier-ignore
    mockFetch(({ url }) => {
      if (url === "/api/runs/r1") return { body: run };
      if (url === "/api/runs/r1/samples") return { body: { samples: [img(4), img(6)], total: 3, next_cursor: "4" } };
      if (url === "/api/runs/r1/samples?cursor=4") return { body: { samples: [img(2)], total: 3, next_cursor: null } };
      return undefined;
    });
    render(<RunDetailScreen id="r1" />);
    await waitFor(() => expect(screen.getByTestId("samples-step-6")).toBeInTheDocument());
    expect(screen.getAllByTestId(/^samples-step-/).map((el) => el.dataset.testid)).toEqual(["samples-step-6", "samples-step-4"]);
    expect(screen.getByText(/The newest 2 of 3 rounds/)).toBeInTheDocument();
    await userEvent.click(screen.getByRole("button", { name: "Show older rounds" }));
    await waitFor(() => expect(screen.getByTestId("samples-step-2")).toBeInTheDocument());
    expect(screen.queryByRole("button", { name: "Show older rounds" })).toBeNull();
  });
});
