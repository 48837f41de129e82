import { screen, waitFor } from "@testing-library/react";
import userEvent from "@testing-library/user-event";
import { beforeEach, describe, expect, it, vi } from "vitest";
import { type Call, INFO } from "../test/fixtures";
import { HOST_WARNING, input, mockTrainServer, renderTrain } from "../test/trainServer";

describe("TrainScreen host RAM and wall-time forecasts (issue 31 item 5)", () => {
  let calls: Call[];
  beforeEach(() => {
    vi.unstubAllGlobals();
    calls = mockTrainServer(() => INFO);
  });

  it("shows the forecasts (RAM beside the free memory, time per phase), and the refusal of a run that will not fit", async () => {
    renderTrain();
    await waitFor(() => expect(input("lora_rank")).toHaveValue("32"));
    await userEvent.click(screen.getByRole("button", { name: "Check" }));
    expect(await screen.findByTestId("preflight-host-ram")).toHaveTextContent("0.79 GB of 3.00 GB free");
    expect(screen.queryByTestId("preflight-host-warning")).toBeNull();
    // the wall-time forecast: total, confidence, each phase with its basis as the tooltip
    expect(screen.getByTestId("preflight-time")).toHaveTextContent("measured");
    const phases = screen.getByTestId("preflight-time-phases");
    expect(phases).toHaveTextContent("weights load");
    expect(phases).toHaveTextContent("measured by 2 earlier runs of this base and plan on this machine");

    await userEvent.clear(input("resolution"));
    await userEvent.type(input("resolution"), "4096");
    await userEvent.click(screen.getByRole("button", { name: "Check" }));
    await waitFor(() => expect(calls.filter((c) => c.url === "/api/train/preflight")).toHaveLength(2));
    expect(await screen.findByTestId("preflight-host-warning")).toHaveTextContent(`Will not start: ${HOST_WARNING}`);
    expect(screen.getByTestId("preflight-host-ram")).toHaveTextContent("5.58 GB of 3.00 GB free");
  });
});
