import { render, screen } from "@testing-library/react";
import { useState } from "react";
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

  it("gives the focus back to the button that opened it when closed (Escape, a button)", async () => {
    function Opener() {
      const [open, setOpen] = useState(false);
      return (
        <>
          <button onClick={() => setOpen(true)}>Stop</button>
          <button>Elsewhere</button>
          {open && (
            <Dialog title="Stop training?" onClose={() => setOpen(false)} footer={<button onClick={() => setOpen(false)}>Continue</button>}>
              <p>body</p>
            </Dialog>
          )}
        </>
      );
    }
    render(<Opener />);
    const stop = screen.getByRole("button", { name: "Stop" });
    stop.focus();
    await userEvent.keyboard("{Enter}");
    expect(screen.getByRole("button", { name: "Continue" })).toHaveFocus();
    await userEvent.keyboard("{Escape}");
    expect(screen.queryByRole("dialog")).toBeNull();
    expect(stop).toHaveFocus();
    await userEvent.keyboard("{Enter}"); // Enter again reopens it, as the user expects
    await userEvent.click(screen.getByRole("button", { name: "Continue" }));
    expect(stop).toHaveFocus();
  });
});
