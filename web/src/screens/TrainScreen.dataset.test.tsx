import { screen, waitFor } from "@testing-library/react";
import userEvent from "@testing-library/user-event";
import { beforeEach, describe, expect, it, vi } from "vitest";
import { type Call, INFO } from "../test/fixtures";
import { input, mockTrainServer, renderTrain } from "../test/trainServer";

describe("TrainScreen validation and masked loss (issue 29 parts 4 and 6)", () => {
  let calls: Call[];
  beforeEach(() => {
    vi.unstubAllGlobals();
    calls = mockTrainServer(() => INFO);
  });

  it("sends the validation split, validate_every and the mask settings, and shows the preflight's lines", async () => {
    renderTrain();
    await waitFor(() => expect(input("lora_rank")).toHaveValue("32"));
    await userEvent.click(screen.getByText("Advanced settings"));
    await userEvent.type(input("validation_split"), "0.1");
    await userEvent.type(input("validate_every"), "50");
    await userEvent.clear(input("unmasked_weight"));
    await userEvent.type(input("unmasked_weight"), "0.2");
    await userEvent.click(input("alpha_mask"));
    await userEvent.click(screen.getByRole("button", { name: "Check" }));
    const validation = await screen.findByTestId("preflight-validation");
    expect(validation).toHaveTextContent("1 image(s) held out of training");
    expect(validation).toHaveTextContent("every 50 steps");
    expect(validation).toHaveTextContent("held.png");
    const masks = screen.getByTestId("preflight-masks");
    expect(masks).toHaveTextContent("7 image(s) with a mask (masks/ folder), unmasked pixels weighted 0.2");
    expect(masks).toHaveTextContent("1 without one train unmasked");
    const sent = calls.find((c) => c.url === "/api/train/preflight")?.body as { config: Record<string, unknown> };
    expect(sent.config).toMatchObject({ validation_split: 0.1, validate_every: 50, unmasked_weight: 0.2, alpha_mask: true });
  });

  it("sends a validation folder by name", async () => {
    renderTrain();
    await waitFor(() => expect(input("lora_rank")).toHaveValue("32"));
    await userEvent.click(screen.getByText("Advanced settings"));
    await userEvent.type(input("validation_split"), "my-val-set");
    await userEvent.click(screen.getByRole("button", { name: "Check" }));
    await screen.findByTestId("preflight-validation");
    const sent = calls.find((c) => c.url === "/api/train/preflight")?.body as { config: Record<string, unknown> };
    expect(sent.config.validation_split).toBe("my-val-set");
    expect(sent.config).not.toHaveProperty("validate_every");
  });
});
