import { render, screen } from "@testing-library/react";
import { beforeEach, describe, expect, it, vi } from "vitest";
import { api } from "../api/endpoints";
import { INFO } from "../test/fixtures";
import { mockTrainServer } from "../test/trainServer";
import { PreflightPanel } from "./PreflightPanel";

describe("the preflight's conditioning line (SDXL's train_text_encoder)", () => {
  beforeEach(() => {
    vi.unstubAllGlobals();
    mockTrainServer(() => INFO);
  });

  it("says when captions are encoded in every step, and stays quiet when they are cached", async () => {
    const perStep = await api.preflight({ family: "sdxl", train_text_encoder: true });
    const { unmount } = render(<PreflightPanel report={perStep} />);
    expect(screen.getByTestId("preflight-conditioning")).toHaveTextContent("captions are encoded in every step");
    unmount();
    const cached = await api.preflight({ family: "sdxl" });
    render(<PreflightPanel report={cached} />);
    expect(screen.queryByTestId("preflight-conditioning")).toBeNull();
  });
});
