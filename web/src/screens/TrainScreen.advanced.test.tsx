/**
 * The collapsed Advanced settings name what a user comes for (RELIABILITY 1417): the optimizer,
 * the adapter kind and the sample prompts were under a bare "Advanced settings".
 */
import { screen, waitFor } from "@testing-library/react";
import { beforeEach, describe, expect, it, vi } from "vitest";
import { INFO } from "../test/fixtures";
import { input, mockTrainServer, renderTrain } from "../test/trainServer";

describe("TrainScreen's Advanced settings", () => {
  beforeEach(() => {
    vi.unstubAllGlobals();
    mockTrainServer(() => INFO);
  });

  it("names the optimizer, the adapter kind and the sample prompts while collapsed, and holds them", async () => {
    renderTrain();
    await waitFor(() => expect(input("lora_rank")).toHaveValue("32"));
    const details = screen.getByTestId("advanced-settings") as HTMLDetailsElement;
    expect(details.open).toBe(false);
    const what = screen.getByTestId("advanced-what");
    expect(details.querySelector("summary")).toContainElement(what);
    expect(what).toHaveTextContent("optimizer, adapter kind (DoRA, LoHa, LoKr), sample prompts, validation, EMA, loss");
    for (const name of ["optimizer", "adapter", "sample_prompts", "validation_split", "ema_decay", "loss"]) {
      expect(details).toContainElement(input(name)); // each named setting is in there
    }
    expect(screen.getByText("Advanced settings").tagName).toBe("SPAN"); // still found by its name
  });

  it("says that runs of other seeds compare on a validation folder, not a fraction (RELIABILITY 1790)", async () => {
    renderTrain();
    await waitFor(() => expect(input("lora_rank")).toHaveValue("32"));
    const details = screen.getByTestId("advanced-settings");
    expect(details).toHaveTextContent("runs of other seeds compare on a validation folder (a fraction's images follow the run's seed)");
  });
});
