import { screen, waitFor } from "@testing-library/react";
import userEvent from "@testing-library/user-event";
import { beforeEach, describe, expect, it, vi } from "vitest";
import { type Call, INFO, mockFetch } from "../test/fixtures";
import { imageMeta } from "../components/Gallery";
import { GenerateScreen } from "./GenerateScreen";
import { renderWithProviders } from "../test/render";

const RUN = { id: "r1", family: "sdxl", output_name: "portrait", lora_file: true, config: { base_model: "/m/sdxl-base" } };
const input = (name: string) => document.querySelector(`[name="${name}"]`) as HTMLInputElement;

describe("GenerateScreen: guidance, negative prompt, a run's preset", () => {
  let calls: Call[];
  beforeEach(() => {
    vi.unstubAllGlobals();
    calls = mockFetch(({ method, url }) => {
      if (url === "/api/info") return { body: INFO };
      if (url.startsWith("/api/train/status")) return { body: { job: null, queue: [], busy: false, event_seq: 0 } };
      if (url.startsWith("/api/loras?family=")) {
        const portrait = { name: "portrait", family: "sdxl", path: "/o/portrait/portrait.safetensors", bytes: 2048, modified: 1, sidecar: null };
        return { body: { root: "/o", loras: url.endsWith("sdxl") ? [portrait] : [] } };
      }
      if (url === "/api/gallery") return { body: { images: [] } };
      if (url === "/api/runs/r1") return { body: RUN };
      if (method === "POST" && url === "/api/generations") {
        return { status: 201, body: { file: "n.png", url: "/gallery/n.png", path: "/g/n.png", seconds: 1, seed: 0, width: 64, height: 64, prompt: "p", loras: [] } };
      }
      return undefined;
    });
  });

  const renderScreen = (fromRun?: string) =>
    renderWithProviders(<GenerateScreen fromRun={fromRun} />);

  it("offers a negative prompt only where the family takes one, and sends both settings", async () => {
    renderScreen();
    await waitFor(() => expect(input("gen_guidance")).toBeInTheDocument());
    expect(screen.getByText("Guidance (distilled)")).toBeInTheDocument();
    expect(input("gen_guidance")).toHaveAttribute("placeholder", "3.5");
    expect(input("negative_prompt")).toBeNull(); // FLUX.1: one pass, no negative prompt
    await userEvent.click(screen.getByRole("radio", { name: "Stable Diffusion XL" }));
    expect(screen.getByText("CFG scale")).toBeInTheDocument();
    expect(input("gen_guidance")).toHaveAttribute("placeholder", "5");
    await userEvent.type(input("negative_prompt"), "blurry");
    await userEvent.type(input("gen_guidance"), "7.5");
    await userEvent.click(screen.getByRole("button", { name: "Generate" }));
    await waitFor(() => expect(calls.some((c) => c.url === "/api/generations")).toBe(true));
    const body = calls.find((c) => c.url === "/api/generations")?.body;
    expect(body).toMatchObject({ family: "sdxl", guidance: 7.5, negative_prompt: "blurry" });
  });

  it("a blank guidance is the family's default and a hidden negative prompt is not sent", async () => {
    renderScreen();
    await waitFor(() => expect(input("gen_guidance")).toBeInTheDocument());
    await userEvent.click(screen.getByRole("button", { name: "Generate" }));
    await waitFor(() => expect(calls.some((c) => c.url === "/api/generations")).toBe(true));
    expect(calls.find((c) => c.url === "/api/generations")?.body).toMatchObject({ family: "flux", guidance: null, negative_prompt: null });
  });

  it("Generate with it: starts on the run's family, base model and LoRA", async () => {
    renderScreen("r1");
    await waitFor(() => expect(screen.getByRole("radio", { name: "Stable Diffusion XL" })).toHaveAttribute("aria-checked", "true"));
    expect(input("gen_base_model")).toHaveValue("/m/sdxl-base");
    await waitFor(() => expect(screen.getByLabelText("use LoRA portrait")).toBeChecked());
  });

  it("offers the text tokens (max_sequence_length) only where the family takes them, and sends them", async () => {
    renderScreen();
    await waitFor(() => expect(input("gen_max_sequence_length")).toBeInTheDocument()); // FLUX.1's T5
    await userEvent.click(screen.getByRole("button", { name: "Generate" }));
    await waitFor(() => expect(calls.some((c) => c.url === "/api/generations")).toBe(true));
    expect(calls.find((c) => c.url === "/api/generations")?.body).toMatchObject({ family: "flux", max_sequence_length: null });
    await waitFor(() => expect(screen.getByRole("button", { name: "Generate" })).toBeEnabled());
    await userEvent.type(input("gen_max_sequence_length"), "16");
    await userEvent.click(screen.getByRole("button", { name: "Generate" }));
    await waitFor(() => expect(calls.filter((c) => c.url === "/api/generations")).toHaveLength(2));
    expect(calls.filter((c) => c.url === "/api/generations")[1].body).toMatchObject({ family: "flux", max_sequence_length: 16 });
    await userEvent.click(screen.getByRole("radio", { name: "Stable Diffusion XL" }));
    expect(input("gen_max_sequence_length")).toBeNull(); // SDXL's CLIP reads a fixed 77 tokens
  });

  it("a gallery image shows its text tokens", () => {
    const img = { file: "a.png", url: "/gallery/a.png", created: 1, seed: 3, steps: 2, max_sequence_length: 16, loras: [] };
    expect(imageMeta(img)).toBe("seed 3 · 2 steps · 16 text tokens");
  });

  it("a gallery image shows its guidance and negative prompt", () => {
    const img = { file: "a.png", url: "/gallery/a.png", created: 1, seed: 3, width: 64, height: 64, steps: 2, guidance: 6.5, negative_prompt: "blurry", loras: [] };
    expect(imageMeta(img)).toBe("seed 3 · 64×64 · 2 steps · guidance 6.5 · not: blurry");
  });
});
