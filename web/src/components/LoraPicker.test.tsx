import { render, screen } from "@testing-library/react";
import { describe, expect, it } from "vitest";
import { LORA_SCALE } from "../api/limits.gen";
import type { Lora } from "../api/types";
import { LoraPicker } from "./LoraPicker";

const LORA: Lora = { name: "portrait", bytes: 1024, family: "flux", modified: 0, path: "/x/portrait.safetensors", sidecar: {}, weights: "raw" };

describe("LoraPicker", () => {
  it("offers the scale range the API accepts (LoraRef.scale), not a narrower one", () => {
    render(<LoraPicker loras={[LORA]} picks={[{ name: "portrait", scale: 1 }]} onChange={() => {}} family="flux" />);
    const slider = screen.getByLabelText("scale of portrait") as HTMLInputElement;
    expect([Number(slider.min), Number(slider.max)]).toEqual([LORA_SCALE.min, LORA_SCALE.max]);
    expect(LORA_SCALE).toEqual({ min: -4, max: 4 }); // web/scripts/routes.mjs copies them from the OpenAPI schema
  });

  it("labels a LoRA holding EMA weights", () => {
    render(<LoraPicker loras={[LORA, { ...LORA, name: "smooth", weights: "ema", raw_step: 4 }]} picks={[]} onChange={() => {}} family="flux" />);
    expect(screen.getAllByText("EMA")).toHaveLength(1);
    expect(screen.getByLabelText("use LoRA smooth").closest("label")).toHaveTextContent("smoothEMA");
  });
});
