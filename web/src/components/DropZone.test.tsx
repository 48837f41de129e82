import { fireEvent, render, screen } from "@testing-library/react";
import userEvent from "@testing-library/user-event";
import { describe, expect, it, vi } from "vitest";
import { DropZone } from "./DropZone";

/** A DataTransfer as a browser gives it for a drop of one image and one folder. */
function dropped(files: File[], folders: string[]) {
  const items = files.map((f) => ({ kind: "file", webkitGetAsEntry: () => ({ name: f.name, isDirectory: folders.includes(f.name) }) }));
  return { dataTransfer: { files, items, types: ["Files"] } };
}

describe("DropZone", () => {
  it("passes the dropped files on, naming the ones that are folders", () => {
    const onFiles = vi.fn();
    render(<DropZone onFiles={onFiles} />);
    const image = new File([new Uint8Array(4)], "a.png");
    const folder = new File([], "10_sks ball");
    fireEvent.drop(screen.getByRole("button", { name: /drop images and captions/ }), dropped([image, folder], ["10_sks ball"]));
    expect(onFiles).toHaveBeenCalledWith([image, folder], ["10_sks ball"]);
  });

  it("opens the file picker from the keyboard (Enter, Space) without scrolling, and not while disabled (RELIABILITY 796)", async () => {
    const picked = vi.spyOn(HTMLInputElement.prototype, "click").mockImplementation(() => undefined);
    const { rerender } = render(<DropZone onFiles={vi.fn()} />);
    const zone = screen.getByRole("button", { name: /drop images and captions/ });
    zone.focus();
    await userEvent.keyboard("{Enter}");
    expect(picked).toHaveBeenCalledTimes(1);
    expect(fireEvent.keyDown(zone, { key: " " })).toBe(false); // Space's default (scrolling) prevented
    expect(picked).toHaveBeenCalledTimes(2);
    rerender(<DropZone onFiles={vi.fn()} disabled />);
    expect(zone).toHaveAttribute("aria-disabled", "true");
    await userEvent.keyboard("{Enter}");
    fireEvent.keyDown(zone, { key: " " });
    await userEvent.click(zone);
    expect(picked).toHaveBeenCalledTimes(2); // an upload runs: no picker, from the keyboard as from a click
    picked.mockRestore();
  });
});
