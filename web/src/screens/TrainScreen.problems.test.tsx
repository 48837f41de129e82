/**
 * A Check or Start refused with problems beside fields out of sight (a phone's screen, the
 * Advanced settings) lists them by the buttons, each a way to its field (RELIABILITY 1410).
 */
import { screen, waitFor, within } from "@testing-library/react";
import userEvent from "@testing-library/user-event";
import { beforeEach, describe, expect, it, vi } from "vitest";
import type { Info } from "../api/types";
import { MISSING } from "../lib/trainForm";
import { INFO } from "../test/fixtures";
import { input, mockTrainServer, renderTrain } from "../test/trainServer";

describe("TrainScreen's problem summary", () => {
  let info: Info = INFO;
  beforeEach(() => {
    vi.unstubAllGlobals();
    info = INFO;
    mockTrainServer(() => info);
  });

  it("lists every field a Check found a problem with, beside the buttons, and each goes to its field", async () => {
    renderTrain();
    await waitFor(() => expect(input("lora_rank")).toHaveValue("32"));
    expect(screen.queryByTestId("problem-summary")).toBeNull();
    await userEvent.clear(input("lora_rank"));
    await userEvent.type(input("lora_rank"), "4096"); // the server: rank too large, and the dataset has no images
    await userEvent.clear(input("batch_size"));
    await userEvent.type(input("batch_size"), "two"); // the form's own problem
    await userEvent.click(screen.getByRole("button", { name: "Check" }));
    const summary = await screen.findByTestId("problem-summary");
    await waitFor(() => expect(summary).toHaveTextContent("3 settings need a change"));
    const names = within(summary).getAllByRole("button").map((b) => b.textContent);
    expect(names).toEqual(["Dataset", "Batch size", "Rank"]); // the page's order
    // right before the buttons the user pressed
    expect(summary.nextElementSibling?.querySelector("button")?.textContent).toBe("Check");
    await userEvent.click(within(summary).getByRole("button", { name: "Rank" }));
    expect(input("lora_rank")).toHaveFocus();
    // a field corrected leaves the list; all corrected, the list is gone
    await userEvent.clear(input("lora_rank"));
    await userEvent.type(input("lora_rank"), "8");
    await waitFor(() => expect(within(summary).queryByRole("button", { name: "Rank" })).toBeNull());
    expect(summary).toHaveTextContent("2 settings need a change");
    await userEvent.clear(input("batch_size"));
    await userEvent.type(input("batch_size"), "1");
    await userEvent.selectOptions(input("data_dir"), "shapes");
    await waitFor(() => expect(screen.queryByTestId("problem-summary")).toBeNull());
  });

  it("names a problem inside the collapsed Advanced settings and a checkbox's by their labels", async () => {
    renderTrain();
    await waitFor(() => expect(input("lora_rank")).toHaveValue("32"));
    await userEvent.click(screen.getByText("Advanced settings"));
    await userEvent.type(input("cache_variants"), "3");
    const details = input("cache_variants").closest("details") as HTMLDetailsElement;
    details.open = false;
    await userEvent.click(screen.getByRole("button", { name: "Check" }));
    const summary = await screen.findByTestId("problem-summary");
    await waitFor(() => expect(within(summary).getAllByRole("button").map((b) => b.textContent)).toEqual(["Cached variants"]));
    expect(summary).toHaveTextContent("1 setting needs a change");
    await userEvent.click(within(summary).getByRole("button", { name: "Cached variants" }));
    expect(input("cache_variants")).toHaveFocus();
    expect(details.open).toBe(true);
    // collapsed again by the user while the problem is listed (no render follows): the name opens it
    // to the field, which a browser does not focus inside a closed <details> (RELIABILITY 1543)
    await userEvent.click(screen.getByText("Advanced settings"));
    expect(details.open).toBe(false);
    await userEvent.click(within(summary).getByRole("button", { name: "Cached variants" }));
    expect(details.open).toBe(true);
    expect(input("cache_variants")).toHaveFocus();
    await userEvent.clear(input("cache_variants"));
    await waitFor(() => expect(screen.queryByTestId("problem-summary")).toBeNull());
    // a checkbox's problem: named by the checkbox's label
    await userEvent.selectOptions(input("optimizer"), "adafactor");
    await userEvent.click(input("adafactor_warmup_init"));
    await userEvent.click(screen.getByRole("button", { name: "Check" }));
    await waitFor(() =>
      expect(within(screen.getByTestId("problem-summary")).getAllByRole("button").map((b) => b.textContent)).toEqual(["Warmup init"]),
    );
    await userEvent.click(within(screen.getByTestId("problem-summary")).getByRole("button", { name: "Warmup init" }));
    expect(input("adafactor_warmup_init")).toHaveFocus();
    // RELIABILITY 1918: the checkbox's problem is read with it, as a field's
    expect(input("adafactor_warmup_init")).toHaveAttribute("aria-invalid", "true");
    expect(input("adafactor_warmup_init")).toHaveAccessibleDescription("warms up the relative step: needs adafactor_relative_step");
  });

  it("reads the family's problem with the family radio group and its chosen radio (RELIABILITY 2060)", async () => {
    renderTrain();
    await waitFor(() => expect(input("lora_rank")).toHaveValue("32"));
    const group = screen.getByRole("radiogroup", { name: "model family" });
    expect(group).not.toHaveAttribute("aria-invalid");
    expect(group).toHaveAccessibleDescription("");
    await userEvent.clear(input("sample_seed"));
    await userEvent.type(input("sample_seed"), "98"); // the fake server's family refusal
    await userEvent.click(screen.getByRole("button", { name: "Check" }));
    const words = "no base model of this family here: fetch one on the Models page";
    await waitFor(() => expect(group).toHaveAccessibleDescription(words));
    expect(group).toHaveAttribute("aria-invalid", "true");
    expect(within(group).getByRole("radio", { checked: true })).toHaveAccessibleDescription(words);
    expect(screen.getAllByRole("alert").some((a) => a.textContent === words)).toBe(true); // announced when it appears, as before
  });

  it("on a fresh home, says how to get a dataset instead of a bare 'required' (RELIABILITY 1415)", async () => {
    info = { ...INFO, datasets: [] };
    renderTrain();
    await waitFor(() => expect(input("lora_rank")).toHaveValue("32"));
    const hint = screen.getByTestId("no-dataset");
    expect(hint).toHaveTextContent("No dataset yet: make one from your images and their captions.");
    expect(within(hint).getByRole("link", { name: "make one" })).toHaveAttribute("href", "#/datasets");
    await userEvent.click(screen.getByRole("button", { name: "Check" }));
    await waitFor(() => expect(input("data_dir").closest("label")).toHaveTextContent(MISSING.data_dir));
    expect(MISSING.data_dir).toContain("make one on the Datasets page");
    expect(within(screen.getByTestId("problem-summary")).getByRole("button", { name: "Dataset" })).toBeInTheDocument();
  });
});
