import { render, screen, waitFor } from "@testing-library/react";
import userEvent from "@testing-library/user-event";
import { afterEach, describe, expect, it, vi } from "vitest";
import type { Checkpoint } from "../api/types";
import { mockFetch, stoppedRun } from "../test/fixtures";
import { ResumeButton } from "./ResumeButton";

const RUN = stoppedRun();
const CHECKPOINTS: Checkpoint[] = [50, 75, 100].map((step) => ({
  name: `step-${step}`,
  step,
  path: `/home/u/.lorastudio/outputs/portrait/checkpoints/step-${step}`,
}));

afterEach(() => vi.unstubAllGlobals());

describe("ResumeButton", () => {
  it("renders nothing for a run that cannot be resumed", () => {
    const { container } = render(
      <ResumeButton run={{ ...RUN, resume_step: null }} onResumed={vi.fn()} onError={vi.fn()} />,
    );
    expect(container).toBeEmptyDOMElement();
  });

  it("posts the resume of that run and hands over the new job", async () => {
    const calls = mockFetch((call) =>
      call.url === "/api/runs/abc123/resume" ? { status: 201, body: { id: "new1", status: "queued" } } : undefined,
    );
    const onResumed = vi.fn();
    render(<ResumeButton run={RUN} onResumed={onResumed} onError={vi.fn()} />);
    await userEvent.click(screen.getByRole("button", { name: "Resume from 100: portrait" }));
    await waitFor(() => expect(onResumed).toHaveBeenCalledWith({ id: "new1", status: "queued" }));
    expect(calls.map((c) => [c.method, c.url, c.body])).toEqual([["POST", "/api/runs/abc123/resume", {}]]);
  });

  it("reports a refused resume with the server's message", async () => {
    mockFetch(() => ({
      status: 400,
      body: { error: "ConfigError", detail: "dataset_fingerprint: differs from the checkpoint", problems: [] },
    }));
    const onError = vi.fn();
    render(<ResumeButton run={RUN} onResumed={vi.fn()} onError={onError} />);
    await userEvent.click(screen.getByRole("button", { name: /^Resum(e from [0-9]+|ing): portrait/ }));
    await waitFor(() => expect(onError).toHaveBeenCalledWith(expect.stringContaining("dataset_fingerprint")));
    expect(screen.getByRole("button", { name: /^Resum(e from [0-9]+|ing): portrait/ })).toBeEnabled();
  });

  it("with the run's checkpoints, lets the user pick one (newest first, preselected) and resumes from it", async () => {
    const calls = mockFetch((call) =>
      call.url === "/api/runs/abc123/resume" ? { status: 201, body: { id: "new2", status: "queued" } } : undefined,
    );
    const onResumed = vi.fn();
    render(<ResumeButton run={RUN} checkpoints={CHECKPOINTS} onResumed={onResumed} onError={vi.fn()} />);
    const picker = screen.getByRole("combobox", { name: "checkpoint to resume from" });
    expect(picker).toHaveValue("step-100");
    expect(screen.getAllByRole("option").map((o) => o.textContent)).toEqual(["step 100 (newest)", "step 75", "step 50"]);
    await userEvent.selectOptions(picker, "step-50");
    await userEvent.click(screen.getByRole("button", { name: "Resume from 50: portrait" }));
    await waitFor(() => expect(onResumed).toHaveBeenCalledWith({ id: "new2", status: "queued" }));
    expect(calls.map((c) => [c.method, c.url, c.body])).toEqual([["POST", "/api/runs/abc123/resume", { checkpoint: "step-50" }]]);
  });
});
