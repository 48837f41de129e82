import { screen, waitFor } from "@testing-library/react";
import userEvent from "@testing-library/user-event";
import { beforeEach, describe, expect, it, vi } from "vitest";
import { type Call, INFO } from "../test/fixtures";
import { input, mockTrainServer, renderTrain } from "../test/trainServer";

describe("TrainScreen latent cache (issue 31 item 6)", () => {
  let calls: Call[];
  beforeEach(() => {
    vi.unstubAllGlobals();
    calls = mockTrainServer(() => INFO);
  });

  it("sends the chosen latent cache and shows where the preflight says the latents go", async () => {
    renderTrain();
    await waitFor(() => expect(input("lora_rank")).toHaveValue("32"));
    await userEvent.click(screen.getByRole("button", { name: "Check" }));
    expect(await screen.findByTestId("preflight-latent-cache")).toHaveTextContent("Latents: in RAM (0.50 GB)");

    await userEvent.selectOptions(input("latent_cache"), "disk");
    await userEvent.click(screen.getByRole("button", { name: "Check" }));
    await waitFor(() => expect(calls.filter((c) => c.url === "/api/train/preflight")).toHaveLength(2));
    const sent = calls.filter((c) => c.url === "/api/train/preflight")[1].body as { config: Record<string, unknown> };
    expect(sent.config.latent_cache).toBe("disk");
    await waitFor(() =>
      expect(screen.getByTestId("preflight-latent-cache")).toHaveTextContent("Latents: on disk, 6 of 8 images cached (2.50 GB)"),
    );
  });
});
