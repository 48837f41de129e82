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
    await userEvent.click(screen.getByRole("button", { name: "Stop and save" }));
    expect(onStop).toHaveBeenLastCalledWith(true);
    await userEvent.click(screen.getByRole("button", { name: "Stop and discard" }));
    expect(onStop).toHaveBeenLastCalledWith(false);
    await userEvent.click(screen.getByRole("button", { name: "Continue" }));
    expect(onCancel).toHaveBeenCalledTimes(1);
    await userEvent.keyboard("{Escape}");
    expect(onCancel).toHaveBeenCalledTimes(2);
  });
});
