import { screen, waitFor } from "@testing-library/react";
import userEvent from "@testing-library/user-event";
import { beforeEach, describe, expect, it, vi } from "vitest";
import { type Call, INFO } from "../test/fixtures";
import { input, mockTrainServer, renderTrain, UPSCALE_WARNING } from "../test/trainServer";

describe("TrainScreen no_upscale", () => {
  let calls: Call[];
  beforeEach(() => {
    vi.unstubAllGlobals();
    calls = mockTrainServer(() => INFO);
  });

  it("shows the preflight's upscale warning, and sends no_upscale when ticked", async () => {
    renderTrain();
    await waitFor(() => expect(input("lora_rank")).toHaveValue("32"));
    await userEvent.click(screen.getByRole("button", { name: "Check" }));
    expect(await screen.findByTestId("preflight-dataset-warning")).toHaveTextContent(UPSCALE_WARNING);

    expect(input("no_upscale")).not.toBeChecked();
    await userEvent.click(input("no_upscale"));
    await userEvent.click(screen.getByRole("button", { name: "Check" }));
    await waitFor(() => expect(calls.filter((c) => c.url === "/api/train/preflight")).toHaveLength(2));
    const sent = calls.filter((c) => c.url === "/api/train/preflight")[1].body as { config: Record<string, unknown> };
    expect(sent.config.no_upscale).toBe(true);
    await waitFor(() => expect(screen.queryByTestId("preflight-dataset-warning")).toBeNull());
  });
});
