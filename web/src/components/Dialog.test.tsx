import { render, screen } from "@testing-library/react";
import userEvent from "@testing-library/user-event";
import { describe, expect, it, vi } from "vitest";
import { Dialog } from "./Dialog";

const dialog = (onClose: () => void) => (
  <Dialog title="Stop training?" onClose={onClose} footer={<><button>Continue</button><button>Stop and save</button></>}>
    <p>body</p>
  </Dialog>
);

describe("Dialog", () => {
  it("keeps the keyboard focus where the user moved it when its parent re-renders (Live: every progress event)", async () => {
    const { rerender } = render(dialog(() => undefined));
    expect(screen.getByRole("button", { name: "Continue" })).toHaveFocus(); // focus moves in on opening
    await userEvent.tab();
    expect(screen.getByRole("button", { name: "Stop and save" })).toHaveFocus();
    rerender(dialog(() => undefined)); // a new onClose, as an inline arrow gives on each render
    expect(screen.getByRole("button", { name: "Stop and save" })).toHaveFocus();
    const onClose = vi.fn();
    rerender(dialog(onClose));
    await userEvent.keyboard("{Escape}");
    expect(onClose).toHaveBeenCalledTimes(1); // the latest onClose is the one called
  });
});
