import { render, screen } from "@testing-library/react";
import { beforeEach, describe, expect, it, vi } from "vitest";
import { api } from "../api/endpoints";
import { INFO } from "../test/fixtures";
import { mockTrainServer } from "../test/trainServer";
import { PreflightPanel } from "./PreflightPanel";

// jobs/card_fit.py's words for a default FLUX.1 run on a 12 GB card, and for a run no plan fits
const PLANNED =
  "the default plan is forecast at ~47.2 GiB, over the 11.6 GiB of NVIDIA GeForce RTX 3060: the run takes memory_budget_gb 10.6 (the card less 1 GiB) and measures the settings left at auto (the lightest forecast at ~3.2 GiB)";
const REFUSED =
  "the run is forecast at ~6.1 GiB of GPU memory even at the lightest plan its settings allow, over the 3.8 GiB of NVIDIA GeForce GTX 1650: train at a lower resolution (now 1024)";

describe("the preflight's verdict on the GPU's memory (jobs/card_fit.py)", () => {
  beforeEach(() => {
    vi.unstubAllGlobals();
    mockTrainServer(() => INFO);
  });

  it("says a default plan over the card is planned within it, a refusal will not start, and nothing when it fits", async () => {
    const report = await api.preflight({ family: "flux" });
    const { unmount } = render(<PreflightPanel report={report} />);
    expect(screen.queryByTestId("preflight-gpu-note")).toBeNull(); // no GPU (or it fits): quiet
    unmount();
    const planned = { ...report, memory: { ...report.memory, gpu_gb: 11.6, gpu_fit: "planned" as const, gpu_note: PLANNED } };
    const second = render(<PreflightPanel report={planned} />);
    expect(screen.getByTestId("preflight-gpu-note")).toHaveTextContent(PLANNED);
    expect(screen.getByTestId("preflight-gpu-note")).not.toHaveTextContent("Will not start");
    second.unmount();
    const refused = { ...report, memory: { ...report.memory, gpu_gb: 3.8, gpu_fit: "refused" as const, gpu_note: REFUSED } };
    render(<PreflightPanel report={refused} />);
    expect(screen.getByTestId("preflight-gpu-note")).toHaveTextContent(`Will not start: ${REFUSED}`);
  });
});
