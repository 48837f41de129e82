import { render, screen } from "@testing-library/react";
import { describe, expect, it, vi } from "vitest";
import { LoraSaved } from "./LoraSaved";

describe("LoraSaved", () => {
  it("is scrolled into view and links the file and Generate with this run", () => {
    const scroll = vi.fn();
    Element.prototype.scrollIntoView = scroll;
    render(<LoraSaved jobId="j1" path="/o/portrait/portrait.safetensors" outputName="portrait" />);
    expect(screen.getByRole("status")).toHaveTextContent("LoRA saved: /o/portrait/portrait.safetensors");
    expect(screen.getByRole("link", { name: "Download" })).toHaveAttribute("href", "/api/loras/portrait/file");
    expect(screen.getByRole("link", { name: "Generate with it" })).toHaveAttribute("href", "#/generate/j1");
    expect(scroll).toHaveBeenCalledTimes(1);
  });
});
