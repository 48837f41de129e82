import { fireEvent, render, screen } from "@testing-library/react";
import { useState } from "react";
import { describe, expect, it } from "vitest";
import type { DatasetEntry } from "../lib/datasetEntries";
import { buildEntries, emptyRow, parseRows, rowsValue } from "../lib/datasetEntries";
import { DatasetEntries } from "./DatasetEntries";
import { PreservationFields } from "./PreservationFields";

// Every key of a `[[datasets]]` entry (lorastudio.config_datasets.DatasetEntry) and the control that
// sets it; README's settings reference lists the same keys.
const CONTROLS: Record<keyof DatasetEntry, string> = {
  path: "folder 1",
  repeats: "sampling 1",
  weight: "sampling 1",
  trigger_word: "trigger word 1",
  default_caption: "default caption 1",
  caption_dropout: "caption dropout 1",
  resolution: "resolution 1",
  shuffle_tags: "shuffle tags 1",
  keep_tokens: "keep tokens 1",
  tag_dropout: "tag dropout 1",
  loss_weight: "loss weight 1",
  regularisation: "regularisation 1",
  prior_prediction: "prior prediction 1",
};

function Editor() {
  const [value, setValue] = useState(rowsValue([{ ...emptyRow("shapes"), regularisation: true }]));
  return (
    <>
      <DatasetEntries value={value} dataDir="shapes" datasets={[{ name: "shapes", path: "/d/shapes", images: 8, captions: 8, markup_captions: 0, markup_counted: true, usable: true, problem: null }]} onChange={setValue} />
      <output data-testid="value">{value}</output>
    </>
  );
}

describe("DatasetEntries", () => {
  it("has a control for every key of a datasets entry, and each reaches the config", () => {
    render(<Editor />);
    for (const label of Object.values(CONTROLS)) expect(screen.getByLabelText(label)).toBeInTheDocument();
    fireEvent.change(screen.getByLabelText("default caption 1"), { target: { value: "a photo" } });
    fireEvent.change(screen.getByLabelText("keep tokens 1"), { target: { value: "1" } });
    fireEvent.change(screen.getByLabelText("tag dropout 1"), { target: { value: "0.2" } });
    fireEvent.change(screen.getByLabelText("shuffle tags 1"), { target: { value: "off" } });
    const rows = parseRows(screen.getByTestId("value").textContent ?? "");
    expect(buildEntries(rows)).toEqual([
      { path: "shapes", default_caption: "a photo", keep_tokens: 1, tag_dropout: 0.2, shuffle_tags: false, regularisation: true },
    ]);
  });
});

describe("the datasets and preservation groups' problems (RELIABILITY 1918)", () => {
  it("are read with each control of their group, which is marked invalid", () => {
    const { rerender } = render(
      <DatasetEntries value={rowsValue([emptyRow("shapes")])} dataDir="shapes" datasets={[]} error="datasets.0.path: not found" onChange={() => undefined} />,
    );
    for (const control of [screen.getByRole("combobox", { name: "folder 1" }), screen.getByRole("textbox", { name: "trigger word 1" })]) {
      expect(control).toHaveAttribute("aria-invalid", "true");
      expect(control).toHaveAccessibleDescription("datasets.0.path: not found");
    }
    rerender(<DatasetEntries value={rowsValue([emptyRow("shapes")])} dataDir="shapes" datasets={[]} onChange={() => undefined} />);
    expect(screen.getByRole("combobox", { name: "folder 1" })).not.toHaveAttribute("aria-invalid");
    render(<PreservationFields value="" error="needs a trigger word" onChange={() => undefined} />);
    const word = screen.getByRole("textbox", { name: "preservation class word" });
    expect(word).toHaveAttribute("aria-invalid", "true");
    expect(word).toHaveAccessibleDescription("needs a trigger word");
  });
});
