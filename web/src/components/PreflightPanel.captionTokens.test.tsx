import { render, screen } from "@testing-library/react";
import { beforeEach, describe, expect, it, vi } from "vitest";
import { api } from "../api/endpoints";
import { INFO } from "../test/fixtures";
import { mockTrainServer } from "../test/trainServer";
import { PreflightPanel } from "./PreflightPanel";

describe("the preflight's caption token count (dataset.caption_tokens)", () => {
  beforeEach(() => {
    vi.unstubAllGlobals();
    mockTrainServer(() => INFO);
  });

  it("names each cut caption's image with its count and the limit", async () => {
    const report = await api.preflight({ family: "flux" });
    const note = "1 of 8 captions are longer than the 32 tokens FLUX.1's text encoder reads and train cut there";
    report.dataset.caption_tokens = { limit: 32, counted: true, cut: [{ file: "shape_03.png", tokens: 61 }], note };
    render(<PreflightPanel report={report} />);
    const shown = screen.getByTestId("preflight-caption-tokens");
    expect(shown).toHaveTextContent(note);
    expect(shown).toHaveTextContent("shape_03.png 61 tokens (limit 32)");
  });

  it("lists the 20 longest and counts the rest", async () => {
    const report = await api.preflight({ family: "flux" });
    const cut = Array.from({ length: 25 }, (_, i) => ({ file: `img_${i}.png`, tokens: 100 - i }));
    report.dataset.caption_tokens = { limit: 77, counted: true, cut, note: "25 of 25 captions are longer" };
    render(<PreflightPanel report={report} />);
    const shown = screen.getByTestId("preflight-caption-tokens");
    expect(shown.querySelectorAll("li")).toHaveLength(21);
    expect(shown).toHaveTextContent("img_19.png 81 tokens (limit 77)");
    expect(shown).not.toHaveTextContent("img_20.png");
    expect(shown).toHaveTextContent("and 5 more");
  });

  it("says plainly when the count is made at the start, and nothing when no caption is cut", async () => {
    const report = await api.preflight({ family: "flux" });
    const note = "caption lengths are counted at the start of the run (the base model's tokenizer is not on this machine)";
    report.dataset.caption_tokens = { limit: 512, counted: false, cut: [], note };
    const { unmount } = render(<PreflightPanel report={report} />);
    expect(screen.getByTestId("preflight-caption-tokens")).toHaveTextContent(note);
    expect(screen.getByTestId("preflight-caption-tokens")).not.toHaveClass("warn");
    unmount();
    report.dataset.caption_tokens = { limit: 512, counted: true, cut: [], note: null };
    render(<PreflightPanel report={report} />);
    expect(screen.queryByTestId("preflight-caption-tokens")).toBeNull();
  });
});
