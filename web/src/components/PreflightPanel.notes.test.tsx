import { render, screen } from "@testing-library/react";
import { beforeEach, describe, expect, it, vi } from "vitest";
import { api } from "../api/endpoints";
import { INFO } from "../test/fixtures";
import { mockTrainServer, TARGETS_NOT_CHECKED } from "../test/trainServer";
import { PreflightPanel } from "./PreflightPanel";

describe("the preflight's notes (checks left to the run's start)", () => {
  beforeEach(() => {
    vi.unstubAllGlobals();
    mockTrainServer(() => INFO);
  });

  it("shows a check that was not made, and nothing when every check was made", async () => {
    const skipped = await api.preflight({ family: "flux", lora_targets: ["to_q"] });
    const { unmount } = render(<PreflightPanel report={skipped} />);
    expect(screen.getByTestId("preflight-note")).toHaveTextContent(TARGETS_NOT_CHECKED);
    unmount();
    const checked = await api.preflight({ family: "flux" });
    render(<PreflightPanel report={checked} />);
    expect(screen.queryByTestId("preflight-note")).toBeNull();
  });
});
