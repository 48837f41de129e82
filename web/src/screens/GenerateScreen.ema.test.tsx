import { screen, waitFor, within } from "@testing-library/react";
import userEvent from "@testing-library/user-event";
import { beforeEach, describe, expect, it, vi } from "vitest";
import type { GalleryImage, Lora } from "../api/types";
import { type Call, INFO, mockFetch } from "../test/fixtures";
import { GenerateScreen } from "./GenerateScreen";
import { renderWithProviders } from "../test/render";

// an EMA run as GET /api/loras lists it: the EMA LoRA, then the raw file validation measured
const SMOOTH: Lora = {
  name: "smooth",
  family: "flux",
  path: "/o/smooth/smooth.safetensors",
  bytes: 2048,
  modified: 1,
  sidecar: null,
  weights: "ema",
  raw_step: 6,
  files: [
    { weights: "ema", step: null, trained_steps: 6, bytes: 2048, url: "/api/loras/smooth/file", validation_loss: null, best: false, last: false },
    { weights: "raw", step: 6, trained_steps: 6, bytes: 2048, url: "/api/loras/smooth/file?step=6", validation_loss: 0.25, best: false, last: true },
  ],
};
const RAW_IMAGE: GalleryImage = {
  file: "raw.png",
  url: "/gallery/raw.png",
  created: 1,
  prompt: "a raw cat",
  seed: 1,
  family: "flux",
  loras: [{ name: "smooth", scale: 0.7, step: 6 }],
};

describe("GenerateScreen with an EMA run", () => {
  let calls: Call[];
  beforeEach(() => {
    vi.unstubAllGlobals();
    calls = mockFetch(({ method, url }) => {
      if (url === "/api/info") return { body: INFO };
      if (url.startsWith("/api/train/status")) return { body: { job: null, queue: [], busy: false, event_seq: 0 } };
      if (url === "/api/loras?family=flux") return { body: { root: "/o", loras: [SMOOTH] } };
      if (url === "/api/gallery") return { body: { images: [RAW_IMAGE] } };
      if (url === "/api/loras/smooth/steps") return { body: { name: "smooth", loras: [] } };
      if (method === "POST" && url === "/api/generations") {
        return { status: 201, body: { file: "n.png", url: "/gallery/n.png", path: "/g/n.png", seconds: 1, seed: 1, width: 64, height: 64, prompt: "x", loras: [] } };
      }
      return undefined;
    });
  });

  const renderScreen = () =>
    renderWithProviders(<GenerateScreen />);

  it("picks the raw file in the main picker and generates with its step", async () => {
    renderScreen();
    await screen.findByTestId("gallery");
    const raw = await screen.findByLabelText("use LoRA smooth (raw, step 6)");
    expect(raw.closest("li")).toHaveTextContent("val 0.2500");
    expect(screen.getByLabelText("use LoRA smooth").closest("li")).toHaveTextContent("EMA");
    await userEvent.click(raw);
    await userEvent.click(screen.getByRole("button", { name: "Generate" }));
    await waitFor(() => expect(calls.some((c) => c.url === "/api/generations")).toBe(true));
    const sent = calls.find((c) => c.url === "/api/generations")?.body as Record<string, unknown>;
    expect(sent.loras).toEqual([{ name: "smooth", scale: 1, step: 6 }]);
  });

  it("reusing an image made with the raw file picks that file again, not the EMA one", async () => {
    renderScreen();
    const item = within(await screen.findByTestId("gallery")).getByRole("button", { name: /a raw cat/ });
    expect(item).toHaveTextContent("smooth @6 ×0.70");
    await screen.findByLabelText("use LoRA smooth (raw, step 6)");
    await userEvent.click(item);
    await userEvent.click(screen.getByRole("button", { name: "Reuse these settings" }));
    expect(screen.getByLabelText("use LoRA smooth (raw, step 6)")).toBeChecked();
    expect(screen.getByLabelText("use LoRA smooth")).not.toBeChecked();
    expect(screen.getByLabelText("scale of smooth (raw, step 6)")).toHaveValue("0.7");
  });
});
