/**
 * Answers that arrive after what they were asked for has changed (RELIABILITY 155-157, 159): a slow
 * answer for the run / dataset shown before never shows under the one shown now, a deleted item
 * says so, a list reloaded twice shows the latest answer, and a double click sends one request.
 */
import { act, fireEvent, render, screen, waitFor } from "@testing-library/react";
import userEvent from "@testing-library/user-event";
import { afterEach, describe, expect, it, vi } from "vitest";
import { TrainingProvider } from "../api/training";
import { CONFIG_DEFAULTS } from "../api/trainConfig.gen";
import type { RunDetail } from "../api/types";
import { BulkCaptions } from "../components/BulkCaptions";
import { CaptionCard } from "../components/CaptionCard";
import { type Call, deferFetch, INFO } from "../test/fixtures";
import { DatasetDetailScreen } from "./DatasetDetailScreen";
import { RunDetailScreen } from "./RunDetailScreen";
import { RunsScreen } from "./RunsScreen";
import { renderWithProviders, withProviders } from "../test/render";

const run = (id: string, status = "completed"): RunDetail => ({
  id,
  output_name: `lora-${id}`,
  family: "flux",
  status: status as RunDetail["status"],
  created_at: "2025-01-01T00:00:00Z",
  started_at: "2025-01-01T00:00:01Z",
  finished_at: "2025-01-01T00:10:00Z",
  steps_run: 10,
  total_steps: 10,
  last_loss: 0.1,
  error: null,
  resume_step: null,
  lora_file: false,
  config: { ...CONFIG_DEFAULTS, family: "flux", base_model: "/m", data_dir: "/d" } as RunDetail["config"],
  metrics: [],
  outputs: [],
});

/** The parts of a run's page other than its record, answered at once. */
function runParts({ url }: Call) {
  if (/^\/api\/runs\/\w+\/samples$/.test(url)) return { body: { samples: [] } };
  if (/^\/api\/runs\/\w+\/checkpoints$/.test(url)) return { body: { checkpoints: [], resume_step: null } };
  if (/^\/api\/runs\/\w+\/log\?/.test(url)) return { body: { lines: [], truncated: false, size_bytes: 0, note: null } };
  if (url.startsWith("/api/train/status")) return { body: { job: null, queue: [], busy: false, event_seq: 0 } };
  if (url === "/api/info") return { body: INFO };
  return undefined;
}

afterEach(() => {
  vi.unstubAllGlobals();
  vi.restoreAllMocks();
});

describe("a slow answer for the item shown before", () => {
  it("run A's record (or its error) never shows under run B", async () => {
    const { held } = deferFetch((c) => (c.url.endsWith("/loras") ? { status: 404, body: { detail: "no LoRA" } } : runParts(c)));
    const { rerender } = render(<RunDetailScreen id="a" />);
    const a = held("/api/runs/a");
    rerender(<RunDetailScreen id="b" />); // the user opened run B before A's record came
    held("/api/runs/b").answer(run("b"));
    expect(await screen.findByText("lora-b")).toBeInTheDocument();
    await act(async () => a.answer(run("a")));
    expect(screen.queryByText("lora-a")).toBeNull();
    expect(screen.getByText("lora-b")).toBeInTheDocument();
  });

  it("run A's error never shows under run B", async () => {
    const { held } = deferFetch((c) => (c.url.endsWith("/loras") ? { status: 404, body: { detail: "no LoRA" } } : runParts(c)));
    const { rerender } = render(<RunDetailScreen id="a" />);
    const a = held("/api/runs/a");
    rerender(<RunDetailScreen id="b" />);
    held("/api/runs/b").answer(run("b"));
    await screen.findByText("lora-b");
    await act(async () => a.answer({ detail: "no run with id 'a'" }, 404));
    expect(screen.queryByRole("alert")).toBeNull();
    expect(screen.getByText("lora-b")).toBeInTheDocument();
  });

  it("dataset A's files never show under dataset B", async () => {
    const files = (name: string) => ({ name, path: `/d/${name}`, files: [{ file: `${name}.png`, caption: null, controls: [], mask: null, bytes: 1, width: 8, height: 8, alpha: false }], dropped: [], total_files: 1 });
    const { held } = deferFetch(runParts);
    const view = (name: string) => withProviders(<DatasetDetailScreen name={name} />, { training: false });
    const { rerender } = render(view("a"));
    const a = held("/api/datasets/a?limit=200");
    rerender(view("b"));
    held("/api/datasets/b?limit=200").answer(files("b"));
    expect(await screen.findByText("b.png")).toBeInTheDocument();
    await act(async () => a.answer(files("a")));
    expect(screen.queryByText("a.png")).toBeNull();
    expect(screen.getByTestId("dataset-counts")).toHaveTextContent(/^1 image · /); // one image, not "1 images"
  });
});

describe("an item deleted elsewhere", () => {
  it("a run that no longer exists says it was deleted and links back to the runs", async () => {
    deferFetch((c) => (c.url === "/api/runs/gone" ? { status: 404, body: { detail: "no run with id 'gone'" } } : (runParts(c) ?? { status: 404, body: { detail: "not found" } })));
    render(<RunDetailScreen id="gone" />);
    expect(await screen.findByTestId("run-load-error")).toHaveTextContent("was deleted, in another tab or with the CLI");
    expect(screen.getByRole("link", { name: "Back to the runs" })).toHaveAttribute("href", "#/runs");
  });

  it("deleting a run another tab deleted first is done, not an error; a double click sends one DELETE", async () => {
    vi.spyOn(window, "confirm").mockReturnValue(true);
    let listed = [run("r1")];
    const { calls, held } = deferFetch((c) => {
      if (c.url === "/api/runs" && c.method === "GET") return { body: { runs: listed } };
      return runParts(c);
    });
    render(
      <TrainingProvider>
        <RunsScreen />
      </TrainingProvider>,
    );
    const button = await screen.findByRole("button", { name: /^Delete: / });
    // two clicks before the first one's answer (and before React re-renders)
    act(() => {
      fireEvent.click(button);
      fireEvent.click(button);
    });
    expect(calls.filter((c) => c.method === "DELETE")).toHaveLength(1);
    listed = [];
    await act(async () => held("/api/runs/r1").answer({ detail: "no run with id 'r1'" }, 404));
    expect(await screen.findByText(/No runs yet/)).toBeInTheDocument();
    expect(screen.queryByText(/no run with id/)).toBeNull();
  });
});

describe("a dataset deleted in another tab", () => {
  const shown = { name: "ds", path: "/d/ds", files: [{ file: "a.png", caption: null, controls: [], mask: null, bytes: 1, width: 8, height: 8, alpha: false }], dropped: [] };

  it("removing an image of it reloads the page, which says the dataset was deleted (not a new empty one)", async () => {
    vi.spyOn(window, "confirm").mockReturnValue(true);
    let gone = false;
    deferFetch((c) => {
      if (c.url === "/api/datasets/ds?limit=200") return gone ? { status: 404, body: { detail: "no dataset ds" } } : { body: shown };
      if (c.method === "DELETE") return { status: 404, body: { detail: "no dataset ds" } };
      return runParts(c);
    });
    renderWithProviders(<DatasetDetailScreen name="ds" />, { training: false });
    await screen.findByText("a.png");
    gone = true;
    await userEvent.click(screen.getByRole("button", { name: "remove a.png" }));
    expect(await screen.findByTestId("dataset-gone")).toHaveTextContent("This dataset was deleted (in another tab or with the CLI)");
    expect(screen.queryByText(/New dataset: drop images/)).toBeNull();
  });

  it("its Delete answered 404 is done: back to the datasets, no error", async () => {
    vi.spyOn(window, "confirm").mockReturnValue(true);
    window.location.hash = "#/datasets/ds";
    deferFetch((c) => {
      if (c.url === "/api/datasets/ds?limit=200" && c.method === "GET") return { body: shown };
      if (c.method === "DELETE") return { status: 404, body: { detail: "no dataset ds" } };
      return runParts(c);
    });
    renderWithProviders(<DatasetDetailScreen name="ds" />, { training: false });
    await userEvent.click(await screen.findByTestId("delete-dataset"));
    await waitFor(() => expect(window.location.hash).toBe("#/datasets"));
    expect(screen.queryByTestId("delete-error")).toBeNull();
  });
});

describe("a list reloaded while a load is in flight", () => {
  it("shows the latest answer: an older one arriving last does not bring back the older list", async () => {
    const { held } = deferFetch(runParts);
    render(
      <TrainingProvider>
        <RunsScreen />
      </TrainingProvider>,
    );
    const first = held("/api/runs");
    await userEvent.click(screen.getByRole("button", { name: "Refresh" }));
    const second = held("/api/runs");
    await act(async () => second.answer({ runs: [run("r1", "completed")] }));
    expect(await screen.findByText("completed")).toBeInTheDocument();
    await act(async () => first.answer({ runs: [run("r1", "running")] }));
    expect(screen.queryByText("running")).toBeNull();
    expect(screen.getByText("completed")).toBeInTheDocument();
  });
});

describe("an edit while its preview or save is in flight", () => {
  it("a bulk-caption Preview answered after the edit changed shows no counts of the old edit", async () => {
    const { held } = deferFetch();
    render(<BulkCaptions name="ds" onDone={() => undefined} />);
    await userEvent.click(screen.getByText("Edit all captions"));
    await userEvent.type(screen.getByRole("textbox", { name: "Find" }), "cat");
    await userEvent.click(screen.getByRole("button", { name: "Preview" }));
    const preview = held("/api/datasets/ds/captions");
    await userEvent.type(screen.getByRole("textbox", { name: "Find" }), "s");
    await act(async () => preview.answer({ changed: 3, captions: 8, written: false, examples: [] }));
    expect(screen.queryByTestId("bulk-result")).toBeNull();
    expect(screen.getByRole("button", { name: "Preview" })).toBeEnabled();
  });

  it("a caption saved with Ctrl+Enter, then blurred while that save is in flight, is written once (no self-conflict)", async () => {
    const { calls, held } = deferFetch();
    const image = { file: "a.png", caption: "old", controls: [], mask: null, bytes: 10, width: 8, height: 8, alpha: false };
    render(<CaptionCard dataset="ds" image={image} onRemoved={() => undefined} />);
    const box = screen.getByLabelText("caption of a.png");
    await userEvent.clear(box);
    await userEvent.type(box, "new{Control>}{Enter}{/Control}");
    act(() => box.blur());
    const first = held("/api/datasets/ds/captions/a.png");
    expect(first.call.body).toEqual({ caption: "new", expected: "old" });
    await act(async () => first.answer({ file: "a.png", caption: "new", caption_file: "a.txt" }));
    await waitFor(() => expect(screen.getByText("saved")).toBeInTheDocument());
    expect(calls.filter((c) => c.method === "PUT")).toHaveLength(1);
    expect(screen.queryByRole("alert")).toBeNull();
  });
});
