import { fireEvent, render, screen } from "@testing-library/react";
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
});
