import { fireEvent, render, screen, within } from "@testing-library/react";
import { describe, expect, it, vi } from "vitest";
import { LORA_SCALE } from "../api/limits.gen";
import type { Lora } from "../api/types";
import { LoraPicker } from "./LoraPicker";
import { mockFetch } from "../test/fixtures";

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

  // an EMA run as GET /api/loras lists it (tests/api/test_api_validation checks the server's side)
  const EMA_RUN: Lora = {
    ...LORA,
    name: "smooth",
    weights: "ema",
    raw_step: 4,
    files: [
      { weights: "ema", step: null, trained_steps: 4, bytes: 2048, url: "/api/loras/smooth/file", validation_loss: null, best: false, last: false },
      { weights: "raw", step: 4, trained_steps: 4, bytes: 2048, url: "/api/loras/smooth/file?step=4", validation_loss: 0.123456, best: true, last: true },
    ],
  };

  it("offers both files of an EMA run, each labelled EMA / raw with its validation loss and marks", () => {
    render(<LoraPicker loras={[EMA_RUN]} picks={[]} onChange={() => {}} family="flux" />);
    const ema = screen.getByLabelText("use LoRA smooth").closest("li")!;
    const raw = screen.getByLabelText("use LoRA smooth (raw, step 4)").closest("li")!;
    expect(ema).toHaveTextContent("EMA");
    expect(ema).not.toHaveTextContent(/val|best|last|raw/);
    expect(raw).toHaveTextContent("raw");
    expect(raw).toHaveTextContent("val 0.1235");
    expect(raw).toHaveTextContent("best");
    expect(raw).toHaveTextContent("last");
    expect(raw).not.toHaveTextContent("EMA");
    expect(screen.getByLabelText("download LoRA smooth (raw, step 4)").getAttribute("href")).toBe("/api/loras/smooth/file?step=4");
    expect(screen.getByLabelText("download LoRA smooth").getAttribute("href")).toBe("/api/loras/smooth/file");
  });

  it("picks the raw file by its step and the EMA one without, independently", () => {
    const onChange = vi.fn();
    const { rerender } = render(<LoraPicker loras={[EMA_RUN]} picks={[]} onChange={onChange} family="flux" />);
    fireEvent.click(screen.getByLabelText("use LoRA smooth (raw, step 4)"));
    expect(onChange).toHaveBeenLastCalledWith([{ name: "smooth", scale: 1, step: 4 }]);
    rerender(<LoraPicker loras={[EMA_RUN]} picks={[{ name: "smooth", scale: 1, step: 4 }]} onChange={onChange} family="flux" />);
    expect((screen.getByLabelText("use LoRA smooth (raw, step 4)") as HTMLInputElement).checked).toBe(true);
    expect((screen.getByLabelText("use LoRA smooth") as HTMLInputElement).checked).toBe(false);
    fireEvent.click(screen.getByLabelText("use LoRA smooth"));
    expect(onChange).toHaveBeenLastCalledWith([{ name: "smooth", scale: 1, step: 4 }, { name: "smooth", scale: 1 }]);
    fireEvent.change(screen.getByLabelText("scale of smooth (raw, step 4)"), { target: { value: "0.5" } });
    expect(onChange).toHaveBeenLastCalledWith([{ name: "smooth", scale: 0.5, step: 4 }]);
  });

  // a step grid's image reused, or a preview's "Generate again" (RELIABILITY 725): the list has the
  // run's final file only, its snapshots are under GET /api/loras/{name}/steps
  it("shows a picked snapshot of a listed LoRA as one (not as deleted), and a gone step as missing", async () => {
    vi.unstubAllGlobals();
    mockFetch(({ url }) =>
      url === "/api/loras/portrait/steps"
        ? { body: { name: "portrait", loras: [{ step: 2, final: false, weights: "raw", path: "/x/loras/portrait-step-2.safetensors", bytes: 1 }] } }
        : undefined,
    );
    const onChange = vi.fn();
    const picks = [{ name: "portrait", scale: 0.8, step: 2 }, { name: "portrait", scale: 1, step: 3 }];
    render(<LoraPicker loras={[LORA]} picks={picks} onChange={onChange} family="flux" />);
    const snapshot = await screen.findByLabelText("use LoRA portrait (raw, step 2)");
    expect(snapshot).toBeChecked();
    expect(within(screen.getByTestId("snapshot-loras")).getByText("snapshot")).toBeInTheDocument();
    expect(screen.getByLabelText("scale of portrait (raw, step 2)")).toHaveValue("0.8");
    // step 3 has no file: that one is missing
    const missing = screen.getByTestId("missing-loras");
    expect(within(missing).getByLabelText("use LoRA portrait (raw, step 3)")).toBeChecked();
    expect(within(missing).queryByLabelText("use LoRA portrait (raw, step 2)")).toBeNull();
    fireEvent.click(snapshot);
    expect(onChange).toHaveBeenLastCalledWith([{ name: "portrait", scale: 1, step: 3 }]);
  });
});
