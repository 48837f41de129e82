import { screen, waitFor } from "@testing-library/react";
import userEvent from "@testing-library/user-event";
import { beforeEach, describe, expect, it, vi } from "vitest";
import { CONFIG_DEFAULTS } from "../api/trainConfig.gen";
import { INFO } from "../test/fixtures";
import { input, mockTrainServer, renderTrain } from "../test/trainServer";

const sdxl = INFO.families[0];
const RUN = {
  id: "r9",
  output_name: "portrait",
  family: "sdxl",
  config: { ...CONFIG_DEFAULTS, ...(sdxl.defaults as object), family: "sdxl", base_model: "/models/sdxl", data_dir: "shapes", output_name: "portrait", lora_rank: 4, learning_rate: 0.0002, steps: 300 },
};

describe("TrainScreen: clone a run", () => {
  beforeEach(() => vi.unstubAllGlobals());

  it("fills the form from the run's config, says whose, and starts a run with those settings", async () => {
    const calls = mockTrainServer(() => INFO, { r9: RUN });
    renderTrain({ cloneOf: "r9" });
    await waitFor(() => expect(input("lora_rank")).toHaveValue("4"));
    expect(screen.getByRole("radio", { name: "Stable Diffusion XL" })).toHaveAttribute("aria-checked", "true");
    expect(input("learning_rate")).toHaveValue("0.0002");
    expect(input("length")).toHaveValue("300");
    expect(input("output_name")).toHaveValue("");
    expect(screen.getByTestId("clone-note")).toHaveTextContent("Settings of run portrait");
    await userEvent.click(screen.getByRole("button", { name: "Check" }));
    await screen.findByTestId("preflight");
    const sent = calls.find((c) => c.url === "/api/train/preflight")?.body as { config: Record<string, unknown> };
    expect(sent.config).toMatchObject({ family: "sdxl", base_model: "/models/sdxl", lora_rank: 4, steps: 300 });
    expect(sent.config).not.toHaveProperty("output_name");
  });

  it("says so when the run cannot be found", async () => {
    mockTrainServer(() => INFO);
    renderTrain({ cloneOf: "gone" });
    expect(await screen.findByText(/Cannot clone run gone/)).toBeInTheDocument();
  });
});
