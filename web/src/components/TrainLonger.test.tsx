import { render, screen, waitFor } from "@testing-library/react";
import userEvent from "@testing-library/user-event";
import { afterEach, describe, expect, it, vi } from "vitest";
import type { RunSummary } from "../api/types";
import { mockFetch } from "../test/fixtures";
import { TrainLonger } from "./TrainLonger";

const RUN: RunSummary = {
  id: "abc123",
  output_name: "portrait",
  family: "flux",
  status: "completed",
  created_at: "2025-01-01T00:00:00Z",
  started_at: "2025-01-01T00:00:01Z",
  finished_at: "2025-01-01T00:10:00Z",
  steps_run: 1000,
  total_steps: 1000,
  last_loss: 0.1,
  error: null,
  resume_step: null,
  lora_file: true,
  train_longer: { from_step: 900, steps: 1000 },
};

afterEach(() => vi.unstubAllGlobals());

async function openForm() {
  await userEvent.click(screen.getByRole("button", { name: "Train longer: portrait" }));
  return screen.getByRole("spinbutton", { name: "New total steps" });
}

describe("TrainLonger", () => {
  it("renders nothing for a run the server does not offer to extend", () => {
    const { container } = render(
      <TrainLonger run={{ ...RUN, train_longer: null }} onStarted={vi.fn()} onError={vi.fn()} />,
    );
    expect(container).toBeEmptyDOMElement();
  });

  it("asks the new total and resumes the run with steps set to it", async () => {
    const calls = mockFetch((call) =>
      call.url === "/api/runs/abc123/resume" ? { status: 201, body: { id: "new1", status: "queued" } } : undefined,
    );
    const onStarted = vi.fn();
    render(<TrainLonger run={RUN} onStarted={onStarted} onError={vi.fn()} />);
    const input = await openForm();
    expect(input).toHaveValue(2000); // twice the run's total, as a starting point
    await userEvent.clear(input);
    await userEvent.type(input, "1500");
    expect(screen.getByText(/from the checkpoint at step 900 to step 1500/)).toBeInTheDocument();
    await userEvent.click(screen.getByRole("button", { name: "Train to 1500 steps" }));
    await waitFor(() => expect(onStarted).toHaveBeenCalledWith({ id: "new1", status: "queued" }));
    expect(calls.map((c) => [c.method, c.url, c.body])).toEqual([
      ["POST", "/api/runs/abc123/resume", { settings: { steps: 1500 } }],
    ]);
  });

  it("does not send a total at or below the run's own", async () => {
    const calls = mockFetch(() => ({ status: 201, body: { id: "x" } }));
    render(<TrainLonger run={RUN} onStarted={vi.fn()} onError={vi.fn()} />);
    const input = await openForm();
    for (const bad of ["1000", "999", "1000.5"]) {
      await userEvent.clear(input);
      await userEvent.type(input, bad);
      expect(screen.getByText("Set more than the run's 1000 steps.")).toBeInTheDocument();
      expect(input).toHaveAttribute("aria-invalid", "true");
      expect(input).toHaveAccessibleDescription("Set more than the run's 1000 steps."); // RELIABILITY 281: read with the input
      expect(screen.getByRole("button", { name: "Train longer" })).toBeDisabled();
    }
    await userEvent.type(input, "{Enter}");
    expect(calls).toEqual([]);
  });

  it("reports a refused extension with the server's message and can be cancelled", async () => {
    mockFetch(() => ({
      status: 400,
      body: { error: "ConfigError", detail: "steps: this run counts epochs (num_epochs)", problems: [] },
    }));
    const onError = vi.fn();
    render(<TrainLonger run={RUN} onStarted={vi.fn()} onError={onError} />);
    await openForm();
    await userEvent.click(screen.getByRole("button", { name: "Train to 2000 steps" }));
    await waitFor(() => expect(onError).toHaveBeenCalledWith(expect.stringContaining("counts epochs")));
    await userEvent.click(screen.getByRole("button", { name: "Cancel" }));
    expect(screen.getByRole("button", { name: "Train longer: portrait" })).toBeEnabled();
  });
});
