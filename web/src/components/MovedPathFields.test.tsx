import { render, screen, waitFor } from "@testing-library/react";
import userEvent from "@testing-library/user-event";
import { afterEach, describe, expect, it, vi } from "vitest";
import { mockFetch, stoppedRun } from "../test/fixtures";
import { ResumeButton } from "./ResumeButton";
import { TrainLonger } from "./TrainLonger";

// The server's refusal of a resume whose run recorded paths with nothing there any more (a moved
// studio home): jobs/resume.py raises ConfigError(training/resume/relocation.py moved_problems(...)),
// answered by api/errors.py as below (messages as the server writes them).
const gone = (field: string, where: string, fix: string, how = `CLI: --set ${field}=...; API: {"settings": {"${field}": ...}}`) =>
  `nothing at ${where} any more (no folder or file there); if it moved (or the studio home was moved or renamed), ` +
  `resume with ${fix} (${how}): its content is compared with the checkpoint's`;
const BASE = { field: "base_model", message: gone("base_model", "/old/home/models/tiny-flux", "base_model set to where it is now, a name under models/ or a path") };
const DATA = { field: "data_dir", message: gone("data_dir", "/old/home/datasets/shapes", "data_dir set to where it is now, a dataset name or a path") };
const entry = (n: number, where: string) => ({
  field: `datasets.${n}.path`,
  message: gone(
    `datasets.${n}.path`,
    where,
    `datasets.${n}.path set to where it is now, a dataset name or a path`,
  ),
});
const refusal = (...problems: { field: string; message: string }[]) => ({
  status: 400,
  body: {
    error: "ConfigError",
    detail: `invalid configuration (${problems.length} problem(s)):` + problems.map((p) => `\n  - ${p.field}: ${p.message}`).join(""),
    problems,
  },
});

const RUN = stoppedRun({ train_longer: { from_step: 100, steps: 1000 } });

afterEach(() => vi.unstubAllGlobals());

describe("a resume of a run whose base or dataset moved", () => {
  it("Resume shows an input for each moved path the refusal names and sends them as settings", async () => {
    const calls = mockFetch((call) =>
      call.body && (call.body as { settings?: unknown }).settings ? { status: 201, body: { id: "new1", status: "queued" } } : refusal(BASE, DATA),
    );
    const onResumed = vi.fn();
    const onError = vi.fn();
    render(<ResumeButton run={RUN} onResumed={onResumed} onError={onError} />);
    await userEvent.click(screen.getByRole("button", { name: "Resume from 100: portrait" }));
    const base = await screen.findByRole("textbox", { name: "Base model (base_model) now at" });
    const data = screen.getByRole("textbox", { name: "Dataset (data_dir) now at" });
    expect(base).toHaveAccessibleDescription(BASE.message); // the old path and what to name
    const resume = screen.getByRole("button", { name: "Resume from 100: portrait" });
    expect(resume).toBeDisabled(); // until each is named
    await userEvent.type(base, "tiny-flux");
    expect(resume).toBeDisabled();
    await userEvent.type(data, " shapes ");
    await userEvent.click(resume);
    await waitFor(() => expect(onResumed).toHaveBeenCalledWith({ id: "new1", status: "queued" }));
    expect(calls.map((c) => c.body)).toEqual([{}, { settings: { base_model: "tiny-flux", data_dir: "shapes" } }]);
    expect(onError).not.toHaveBeenCalled(); // said at the inputs
  });

  it("Train longer shows the moved dataset's input and sends it with the steps", async () => {
    const calls = mockFetch((call) =>
      (call.body as { settings: Record<string, unknown> }).settings.data_dir ? { status: 201, body: { id: "new2", status: "queued" } } : refusal(DATA),
    );
    const onStarted = vi.fn();
    render(<TrainLonger run={RUN} onStarted={onStarted} onError={vi.fn()} />);
    await userEvent.click(screen.getByRole("button", { name: "Train longer: portrait" }));
    await userEvent.click(screen.getByRole("button", { name: "Train to 2000 steps" }));
    const data = await screen.findByRole("textbox", { name: "Dataset (data_dir) now at" });
    expect(screen.getByRole("button", { name: "Train longer" })).toBeDisabled();
    await userEvent.type(data, "/mnt/new/shapes");
    await userEvent.click(screen.getByRole("button", { name: "Train to 2000 steps" }));
    await waitFor(() => expect(onStarted).toHaveBeenCalledWith({ id: "new2", status: "queued" }));
    expect(calls.map((c) => c.body)).toEqual([{ settings: { steps: 2000 } }, { settings: { steps: 2000, data_dir: "/mnt/new/shapes" } }]);
  });

  it("Resume names each moved entry of a multi-dataset run alone (datasets.N.path), the other problems said", async () => {
    const [first, third] = [entry(0, "/old/x"), entry(2, "/old/z")];
    const other = { field: "save_every", message: "must be at least 1" };
    const calls = mockFetch((call) =>
      (call.body as { settings?: unknown }).settings ? { status: 201, body: { id: "new3", status: "queued" } } : refusal(BASE, first, third, other),
    );
    const onResumed = vi.fn();
    const onError = vi.fn();
    render(<ResumeButton run={RUN} onResumed={onResumed} onError={onError} />);
    await userEvent.click(screen.getByRole("button", { name: "Resume from 100: portrait" }));
    const one = await screen.findByRole("textbox", { name: "Dataset entry 1 (datasets.0.path) now at" });
    const three = screen.getByRole("textbox", { name: "Dataset entry 3 (datasets.2.path) now at" });
    expect(three).toHaveAccessibleDescription(third.message); // its old path, what to name
    expect(onError).toHaveBeenCalledWith(`save_every: ${other.message}`); // only what no input says
    await userEvent.type(screen.getByRole("textbox", { name: "Base model (base_model) now at" }), "tiny-flux");
    await userEvent.type(one, "x2");
    const resume = screen.getByRole("button", { name: "Resume from 100: portrait" });
    expect(resume).toBeDisabled(); // entry 3 not named yet
    await userEvent.type(three, "/mnt/z");
    await userEvent.click(resume);
    await waitFor(() => expect(onResumed).toHaveBeenCalledWith({ id: "new3", status: "queued" }));
    expect(calls[1].body).toEqual({ settings: { base_model: "tiny-flux", "datasets.0.path": "x2", "datasets.2.path": "/mnt/z" } });
  });

  it("Train longer names a moved entry with the steps", async () => {
    const moved = entry(1, "/old/y");
    const calls = mockFetch((call) =>
      (call.body as { settings: Record<string, unknown> }).settings["datasets.1.path"] ? { status: 201, body: { id: "new4", status: "queued" } } : refusal(moved),
    );
    const onStarted = vi.fn();
    const onError = vi.fn();
    render(<TrainLonger run={RUN} onStarted={onStarted} onError={onError} />);
    await userEvent.click(screen.getByRole("button", { name: "Train longer: portrait" }));
    await userEvent.click(screen.getByRole("button", { name: "Train to 2000 steps" }));
    await userEvent.type(await screen.findByRole("textbox", { name: "Dataset entry 2 (datasets.1.path) now at" }), "y2");
    await userEvent.click(screen.getByRole("button", { name: "Train to 2000 steps" }));
    await waitFor(() => expect(onStarted).toHaveBeenCalledWith({ id: "new4", status: "queued" }));
    expect(calls[1].body).toEqual({ settings: { steps: 2000, "datasets.1.path": "y2" } });
    expect(onError).not.toHaveBeenCalled(); // said at its input
  });
});
