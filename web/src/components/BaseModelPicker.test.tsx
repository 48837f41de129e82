import { render, screen } from "@testing-library/react";
import userEvent from "@testing-library/user-event";
import { useState } from "react";
import { describe, expect, it } from "vitest";
import { choicesFromInfo, defaultBaseModel, defaultFamily, type ModelChoice } from "../lib/baseModels";
import { BaseModelPicker } from "./BaseModelPicker";

const [tiny, real, sdxl, odd] = choicesFromInfo([
  { name: "tiny-flux", path: "/m/tiny-flux", family: "flux" },
  { name: "FLUX.1-dev", path: "/m/FLUX.1-dev", family: "flux" },
  { name: "sdxl-base", path: "/m/sdxl-base", family: "sdxl" },
  { name: "mystery", path: "/m/mystery", family: null },
]);
const broken: ModelChoice = { name: "half", path: "/m/half", family: "flux", demo: false, problem: "incomplete download" };

describe("defaultBaseModel", () => {
  it("prefers a usable real model of the family, falls back to the tiny demo, else nothing", () => {
    expect(tiny.demo && !real.demo).toBe(true);
    expect(defaultBaseModel([tiny, real, sdxl], "flux")).toBe(real.path);
    expect(defaultBaseModel([broken, tiny, sdxl], "flux")).toBe(tiny.path);
    expect(defaultBaseModel([tiny, odd], "sdxl")).toBe("");
  });
});

function Harness({ models, initial }: { models: ModelChoice[]; initial: string }) {
  const [value, setValue] = useState(initial);
  return (
    <>
      <BaseModelPicker name="base_model" models={models} family="flux" value={value} onChange={setValue} />
      <output data-testid="value">{value}</output>
    </>
  );
}

describe("BaseModelPicker", () => {
  it("lists the family's local models and reveals a text field for a hub id", async () => {
    render(<Harness models={[tiny, real, broken, sdxl, odd]} initial={real.path} />);
    const select = screen.getByRole("combobox") as HTMLSelectElement;
    expect(select.name).toBe("base_model");
    const labels = [...select.options].map((o) => o.textContent);
    expect(labels).toEqual([
      "tiny-flux (tiny demo)",
      "FLUX.1-dev",
      "half (incomplete download)",
      "mystery (unknown family)",
      "Hub id or another folder…",
    ]);
    expect(select.options[2].disabled).toBe(true);
    await userEvent.selectOptions(select, "Hub id or another folder…");
    const input = screen.getByRole("textbox");
    expect(input).toHaveAttribute("name", "base_model");
    await userEvent.type(input, "owner/model");
    expect(screen.getByTestId("value")).toHaveTextContent("owner/model");
    await userEvent.selectOptions(screen.getByRole("combobox"), "tiny-flux (tiny demo)");
    expect(screen.getByTestId("value")).toHaveTextContent(tiny.path);
    expect(screen.queryByRole("textbox")).toBeNull();
  });

  it("is a text field with an explanation when the family has no local model", () => {
    render(<Harness models={[sdxl]} initial="" />);
    expect(screen.queryByRole("combobox")).toBeNull();
    expect(screen.getByRole("textbox")).toHaveAttribute("name", "base_model");
    expect(screen.getByText(/no local flux model/)).toBeInTheDocument();
  });
});

describe("defaultFamily", () => {
  const families = [{ name: "sdxl" }, { name: "flux" }, { name: "qwen-image" }];
  it("starts with the family of the first real model, else of a demo model, else FLUX.1", () => {
    expect(defaultFamily([tiny, sdxl], families)).toBe("sdxl");
    expect(defaultFamily([tiny, odd], families)).toBe("flux");
    expect(defaultFamily([broken], [{ name: "sdxl" }, { name: "qwen-image" }])).toBe("sdxl");
  });
});
