import { render, screen } from "@testing-library/react";
import userEvent from "@testing-library/user-event";
import { describe, expect, it, vi } from "vitest";
import { StopDialog } from "./StopDialog";

describe("StopDialog", () => {
  it("offers Continue, Stop and save, Stop and discard, each doing what it says", async () => {
    const onStop = vi.fn();
    const onCancel = vi.fn();
    render(<StopDialog onStop={onStop} onCancel={onCancel} step={12} />);
    expect(screen.getByRole("dialog", { name: "Stop training?" })).toHaveTextContent("12 steps");
    // RELIABILITY 1916: what each choice does is read on opening, with the focus on Continue
    expect(screen.getByRole("dialog")).toHaveAccessibleDescription(/^Stop and save writes a LoRA of the 12 steps run so far\. Stop and discard ends the run without a LoRA and deletes the checkpoints/);
    expect(screen.getByRole("button", { name: "Continue" })).toHaveFocus();
    await userEvent.click(screen.getByRole("button", { name: "Stop and save" }));
    expect(onStop).toHaveBeenLastCalledWith(true);
    await userEvent.click(screen.getByRole("button", { name: "Stop and discard" }));
    expect(onStop).toHaveBeenLastCalledWith(false);
    await userEvent.click(screen.getByRole("button", { name: "Continue" }));
    expect(onCancel).toHaveBeenCalledTimes(1);
    await userEvent.keyboard("{Escape}");
    expect(onCancel).toHaveBeenCalledTimes(2);
  });

  it("before the first step: nothing to save, so Continue or Stop (with save: a step that ends meanwhile is kept)", async () => {
    const onStop = vi.fn();
    render(<StopDialog onStop={onStop} onCancel={vi.fn()} step={0} />);
    expect(screen.getByTestId("stop-nothing")).toHaveTextContent("nothing to save");
    expect(screen.getByRole("dialog")).toHaveAccessibleDescription(/^No step has run yet, so there is nothing to save/);
    expect(screen.queryByRole("button", { name: "Stop and save" })).toBeNull();
    expect(screen.queryByRole("button", { name: "Stop and discard" })).toBeNull();
    await userEvent.click(screen.getByRole("button", { name: "Stop" }));
    expect(onStop).toHaveBeenLastCalledWith(true);
  });

  it("says that a stop waits for the sample round or checkpoint in progress", () => {
    const { rerender } = render(<StopDialog onStop={vi.fn()} onCancel={vi.fn()} />);
    expect(screen.getByTestId("stop-wait")).toHaveTextContent("sample round or checkpoint in progress is finished first");
    rerender(<StopDialog onStop={vi.fn()} onCancel={vi.fn()} work="sample round" />);
    expect(screen.getByTestId("stop-wait")).toHaveTextContent("A sample round is in progress: the run stops once it is done");
  });

  it("takes focus and keeps Tab inside the dialog", async () => {
    render(<StopDialog onStop={vi.fn()} onCancel={vi.fn()} />);
    const [first, , last] = ["Continue", "Stop and save", "Stop and discard"].map((name) =>
      screen.getByRole("button", { name }),
    );
    expect(first).toHaveFocus();
    await userEvent.tab({ shift: true });
    expect(last).toHaveFocus();
    await userEvent.tab();
    expect(first).toHaveFocus();
  });
});
