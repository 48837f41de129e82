import { screen, waitFor, within } from "@testing-library/react";
import userEvent from "@testing-library/user-event";
import { beforeEach, describe, expect, it, vi } from "vitest";
import type { GalleryImage } from "../api/types";
import { type Call, galleryImage, INFO, mockFetch } from "../test/fixtures";
import { GenerateScreen } from "./GenerateScreen";
import { renderWithProviders } from "../test/render";

const OLD: GalleryImage = galleryImage([{ name: "cats", scale: 0.8 }]);
const DORA_NOTE = "DoRA file /o/d/d.safetensors: nothing in its header says how its dora_scale was written";
const NEW: GalleryImage = { ...OLD, file: "new.png", url: "/gallery/new.png", created: 2, prompt: "a new dog", seed: 3, loras: [] };

describe("GenerateScreen", () => {
  let calls: Call[];
  let images: GalleryImage[];
  let catsSteps: unknown = null; // a test's own /api/loras/cats/steps answer
  beforeEach(() => {
    vi.unstubAllGlobals();
    images = [OLD];
    catsSteps = null;
    calls = mockFetch(({ method, url, body }) => {
      if (url === "/api/info") return { body: INFO };
      if (method === "POST" && url === "/api/generations" && (body as { prompt?: string }).prompt === "too strong") {
        // FastAPI's 422 of a LoRA scale out of range, and a 400 problem of a field the form has no input for
        return { status: 422, body: { detail: [{ loc: ["body", "loras", 0, "scale"], msg: "Input should be less than or equal to 4", type: "less_than_equal" }] } };
      }
      if (url.startsWith("/api/train/status")) return { body: { job: null, queue: [], busy: false, event_seq: 0 } };
      if (url === "/api/loras?family=flux") {
        return { body: { root: "/o", loras: [{ name: "cats", family: "flux", path: "/o/cats/cats.safetensors", bytes: 2048, modified: 1, sidecar: null }] } };
      }
      if (url === "/api/gallery") return { body: { images } };
      const gone = method === "DELETE" ? url.match(/^\/api\/gallery\/([^/]+)$/)?.[1] : undefined;
      if (gone) {
        images = images.filter((i) => i.file !== gone);
        return { body: { deleted: [gone, gone.replace(".png", ".json")] } };
      }
      if (url === "/api/loras/cats/steps" && catsSteps) return { body: catsSteps };
      if (url === "/api/loras/cats/steps") {
        const at = (step: number, final: boolean) => ({
          step,
          final,
          path: final ? "/o/cats/cats.safetensors" : `/o/cats/loras/cats-step-00000${step}.safetensors`,
          url: final ? "/api/loras/cats/file" : `/api/loras/cats/file?step=${step}`,
          best: step === 2, // the validation marks of a run with validation_split
          last: final,
        });
        return { body: { name: "cats", loras: [at(2, false), at(4, false), at(6, true)] } };
      }
      if (method === "POST" && url === "/api/generations" && (body as { prompt?: string }).prompt === "a dora") {
        images = [NEW, OLD]; // the server's warning of a DoRA file read by a guessed rule (RELIABILITY 2162)
        return { status: 201, body: { file: "new.png", url: "/gallery/new.png", path: "/g/new.png", seconds: 1.5, seed: 3, width: 64, height: 64, prompt: "a dora", loras: [], warnings: [DORA_NOTE] } };
      }
      if (method === "POST" && url === "/api/generations") {
        images = [NEW, OLD];
        return { status: 201, body: { file: "new.png", url: "/gallery/new.png", path: "/g/new.png", seconds: 1.5, seed: 3, width: 64, height: 64, prompt: "a new dog", loras: [] } };
      }
      return undefined;
    });
  });

  const renderScreen = () => renderWithProviders(<GenerateScreen />);

  it("shows the server gallery with each image's prompt, seed and LoRAs, and reuses its settings", async () => {
    renderScreen();
    const gallery = await screen.findByTestId("gallery");
    const item = within(gallery).getByRole("button", { name: /an old cat/ });
    expect(item).toHaveTextContent("seed 7 · 64×64 · 4 steps");
    expect(item).toHaveTextContent("cats ×0.80");
    // the LoRA list offers a download of the .safetensors
    expect(await screen.findByRole("link", { name: "download LoRA cats" })).toHaveAttribute("href", "/api/loras/cats/file");
    // the newest image is shown at first
    expect(screen.getByTestId("result-image")).toHaveAttribute("src", "/gallery/old.png");
    await userEvent.click(item);
    expect(item).toHaveAttribute("aria-pressed", "true");
    await userEvent.click(screen.getByRole("button", { name: "Reuse these settings" }));
    expect(document.querySelector('[name="prompt"]')).toHaveValue("an old cat");
    expect(document.querySelector('[name="gen_seed"]')).toHaveValue("7");
    expect(screen.getByLabelText("use LoRA cats")).toBeChecked();
    expect(screen.getByLabelText("scale of cats")).toHaveValue("0.8");
  });

  it("deletes the shown image after asking, and shows the next one", async () => {
    images = [NEW, OLD];
    const confirm = vi.fn(() => true);
    vi.stubGlobal("confirm", confirm);
    renderScreen();
    await waitFor(() => expect(screen.getByTestId("result-image")).toHaveAttribute("src", "/gallery/new.png"));
    await userEvent.click(screen.getByRole("button", { name: "Delete this image" }));
    expect(confirm).toHaveBeenCalledWith(expect.stringContaining("a new dog"));
    await waitFor(() => expect(screen.getByTestId("result-image")).toHaveAttribute("src", "/gallery/old.png"));
    expect(calls.some((c) => c.method === "DELETE" && c.url === "/api/gallery/new.png")).toBe(true);
    expect(within(screen.getByTestId("gallery")).queryByRole("button", { name: /a new dog/ })).toBeNull();
    expect(screen.getByText("1 image")).toBeInTheDocument();
    // declined: nothing is deleted
    confirm.mockReturnValue(false);
    await userEvent.click(screen.getByRole("button", { name: "Delete this image" }));
    expect(calls.filter((c) => c.method === "DELETE")).toHaveLength(1);
  });

  it("says the LoRA list could not be loaded instead of 'no LoRA yet'", async () => {
    const failing = mockFetch(({ url }) => {
      if (url === "/api/info") return { body: INFO };
      if (url.startsWith("/api/train/status")) return { body: { job: null, queue: [], busy: false, event_seq: 0 } };
      if (url === "/api/gallery") return { body: { images: [] } };
      if (url === "/api/loras?family=flux") return { status: 500, body: { detail: "the outputs folder cannot be read" } };
      return undefined;
    });
    renderScreen();
    expect(await screen.findByText(/Cannot load the flux LoRAs: the outputs folder cannot be read/)).toBeInTheDocument();
    expect(screen.queryByText(/No trained flux LoRA yet/)).toBeNull();
    expect(failing.some((c) => c.url === "/api/loras?family=flux")).toBe(true);
  });

  it("shows a LoRA's problem under the LoRA list", async () => {
    renderScreen();
    await screen.findByTestId("gallery");
    await userEvent.click(await screen.findByLabelText("use LoRA cats"));
    await userEvent.clear(document.querySelector('[name="prompt"]') as HTMLElement);
    await userEvent.type(document.querySelector('[name="prompt"]') as HTMLElement, "too strong");
    await userEvent.click(screen.getByRole("button", { name: "Generate" }));
    const list = (await screen.findByLabelText("use LoRA cats")).closest(".field") as HTMLElement;
    await waitFor(() => expect(list).toHaveTextContent("#1 scale: Input should be less than or equal to 4"));
  });

  it("shows the server's warning with the image it made, and none with an image picked after", async () => {
    renderScreen();
    await screen.findByTestId("gallery");
    await userEvent.clear(document.querySelector('[name="prompt"]') as HTMLElement);
    await userEvent.type(document.querySelector('[name="prompt"]') as HTMLElement, "a dora");
    await userEvent.click(screen.getByRole("button", { name: "Generate" }));
    await waitFor(() => expect(screen.getByTestId("result-image")).toHaveAttribute("src", "/gallery/new.png"));
    expect(screen.getByTestId("generate-warning")).toHaveTextContent(DORA_NOTE);
    await userEvent.click(within(screen.getByTestId("gallery")).getByTitle("an old cat"));
    await waitFor(() => expect(screen.queryByTestId("generate-warning")).toBeNull());
  });

  it("generates with the preselected tiny model and shows the new image first", async () => {
    renderScreen();
    await screen.findByTestId("gallery");
    expect(document.querySelector('[name="gen_base_model"]')).toHaveValue(INFO.models[0].path);
    const said = screen.getByRole("status"); // the result's polite region, there before anything is said (RELIABILITY 798)
    expect(said).toHaveTextContent(/^$/); // an image picked from the gallery is no news
    await userEvent.click(screen.getByRole("button", { name: "Generate" }));
    await waitFor(() => expect(screen.getByTestId("result-image")).toHaveAttribute("src", "/gallery/new.png"));
    expect(said).toHaveTextContent(/^Image generated in [0-9.]+ s: a new dog$/);
    const sent = calls.find((c) => c.url === "/api/generations")?.body as Record<string, unknown>;
    expect(sent).toMatchObject({ family: "flux", base_model: INFO.models[0].path, loras: [] });
    const items = within(screen.getByTestId("gallery")).getAllByRole("button");
    expect(items.map((b) => b.getAttribute("title"))).toEqual(["a new dog", "an old cat"]);
    expect(items[0]).toHaveAttribute("aria-pressed", "true");
  });

  it("reusing an image's settings brings back its text tokens and an EMA step pick (RELIABILITY 810, 812)", async () => {
    images = [{ ...OLD, max_sequence_length: 16, loras: [{ name: "cats", scale: 1, step: 2, weights: "ema" }] }];
    renderScreen();
    const item = within(await screen.findByTestId("gallery")).getByRole("button", { name: /an old cat/ });
    expect(item).toHaveTextContent("cats @2 EMA ×1.00");
    await userEvent.click(item);
    await userEvent.click(screen.getByRole("button", { name: "Reuse these settings" }));
    expect(document.querySelector('[name="gen_max_sequence_length"]')).toHaveValue("16");
    expect(screen.getByTestId("generate-advanced")).toHaveAttribute("open");
    await userEvent.click(screen.getByRole("button", { name: "Generate" }));
    await waitFor(() => expect(calls.some((c) => c.url === "/api/generations")).toBe(true));
    expect(calls.find((c) => c.url === "/api/generations")?.body).toMatchObject({
      max_sequence_length: 16, loras: [{ name: "cats", scale: 1, step: 2, weights: "ema" }],
    }); // prettier-ignore
  });

  it("a single-file base model asks for its base config and sends it", async () => {
    images = [{ ...OLD, base_model: "/m/flux-finetune.safetensors", base_config: "/m/flux-", loras: [] }];
    renderScreen();
    expect(document.querySelector('[name="gen_base_config"]')).toBeNull();
    const item = within(await screen.findByTestId("gallery")).getByRole("button", { name: /an old cat/ });
    await userEvent.click(item);
    await userEvent.click(screen.getByRole("button", { name: "Reuse these settings" }));
    const config = document.querySelector('[name="gen_base_config"]') as HTMLElement;
    expect(config).toHaveValue("/m/flux-"); // reused from the image's settings
    await userEvent.type(config, "dev");
    await userEvent.click(screen.getByRole("button", { name: "Generate" }));
    await waitFor(() => expect(calls.some((c) => c.url === "/api/generations")).toBe(true));
    const sent = calls.find((c) => c.url === "/api/generations")?.body as Record<string, unknown>;
    expect(sent).toMatchObject({ base_model: "/m/flux-finetune.safetensors", base_config: "/m/flux-dev" });
  });

  it("reusing an image's settings sends its revision and prediction type back, for its base model only", async () => {
    images = [{ ...OLD, base_model: "/m/sdxl-v.safetensors", revision: "v2", v_prediction: true, loras: [] }];
    renderScreen();
    const item = within(await screen.findByTestId("gallery")).getByRole("button", { name: /an old cat/ });
    await userEvent.click(item);
    await userEvent.click(screen.getByRole("button", { name: "Reuse these settings" }));
    await userEvent.click(screen.getByRole("button", { name: "Generate" }));
    await waitFor(() => expect(calls.some((c) => c.url === "/api/generations")).toBe(true));
    const sent = calls.filter((c) => c.url === "/api/generations").map((c) => c.body as Record<string, unknown>);
    expect(sent[0]).toMatchObject({ base_model: "/m/sdxl-v.safetensors", revision: "v2", v_prediction: true });
    // another base model chosen: the image's revision and prediction type are not its own
    const base = document.querySelector('[name="gen_base_model"]') as HTMLElement;
    await userEvent.clear(base);
    await userEvent.type(base, "/m/other");
    await userEvent.click(screen.getByRole("button", { name: "Generate" }));
    await waitFor(() => expect(calls.filter((c) => c.url === "/api/generations").length).toBe(2));
    const second = calls.filter((c) => c.url === "/api/generations")[1].body as Record<string, unknown>;
    expect(second.base_model).toBe("/m/other");
    expect(second).not.toHaveProperty("revision");
    expect(second).not.toHaveProperty("v_prediction");
  });

  it("Ctrl+Enter in the prompt generates", async () => {
    renderScreen();
    await screen.findByTestId("gallery");
    const prompt = document.querySelector('[name="prompt"]') as HTMLTextAreaElement;
    await userEvent.clear(prompt);
    await userEvent.type(prompt, "a dog{Control>}{Enter}{/Control}");
    await waitFor(() => expect(calls.some((c) => c.url === "/api/generations")).toBe(true));
    expect(calls.find((c) => c.url === "/api/generations")?.body).toMatchObject({ prompt: "a dog" });
  });

  it("renders one prompt and seed over the chosen steps of a LoRA as a grid", async () => {
    renderScreen();
    await screen.findByTestId("gallery");
    await userEvent.click(await screen.findByLabelText("use LoRA cats"));
    const grid = await screen.findByTestId("step-grid");
    expect(within(grid).getByLabelText("step 2 · best")).toBeChecked(); // the validation marks
    expect(within(grid).getByLabelText("final (step 6) · last")).toBeChecked();
    await userEvent.click(within(grid).getByLabelText("step 4")); // leave step 4 out
    const said = within(grid).getByTestId("grid-announcement"); // a polite status there before the grid
    expect(said).toHaveAttribute("role", "status");
    expect(said).toHaveTextContent(/^$/);
    await userEvent.click(within(grid).getByRole("button", { name: /Render grid \(2 images/ }));
    await waitFor(() => expect(within(grid).getAllByRole("img")).toHaveLength(2));
    await waitFor(() => expect(said).toHaveTextContent("Grid rendered: 2 images of cats, in the gallery.")); // RELIABILITY 1913
    const sent = calls.filter((c) => c.url === "/api/generations").map((c) => c.body as Record<string, unknown>);
    expect(sent.map((b) => b.loras)).toEqual([[{ name: "cats", scale: 1, step: 2 }], [{ name: "cats", scale: 1 }]]);
    expect(new Set(sent.map((b) => `${b.prompt}|${b.seed}`)).size).toBe(1); // one prompt and seed
    expect(within(grid).getAllByRole("img").map((i) => i.getAttribute("alt"))).toEqual(["cats step 2: a new dog", "cats final (step 6): a new dog"]); // each its prompt too
  });

  it("generates with an EMA run's raw final file by its step, and with the EMA file without one", async () => {
    catsSteps = {
      name: "cats",
      loras: [
        { step: 3, final: false, weights: "raw", path: "/o/cats/loras/cats-step-000003.safetensors", url: "/api/loras/cats/file?step=3", best: false, last: false },
        // the EMA weights step 3's checkpoint kept (RELIABILITY 812): its own cell, picked by weights
        { step: 3, final: false, weights: "ema", path: "/o/cats/checkpoints/step-000003/cats-step-000003.ema.safetensors", url: "/api/loras/cats/file?step=3&weights=ema", best: false, last: false },
        { step: 6, final: true, weights: "raw", path: "/o/cats/cats.raw.safetensors", url: "/api/loras/cats/file?step=6", best: true, last: true },
        { step: 6, final: true, weights: "ema", path: "/o/cats/cats.safetensors", url: "/api/loras/cats/file", best: false, last: false },
      ],
    };
    renderScreen();
    await screen.findByTestId("gallery");
    await userEvent.click(await screen.findByLabelText("use LoRA cats"));
    const grid = await screen.findByTestId("step-grid");
    expect(within(grid).getByLabelText("final (step 6, raw) · best · last")).toBeChecked();
    expect(within(grid).getByLabelText("final (step 6, EMA)")).toBeChecked();
    expect(within(grid).getByLabelText("step 3")).toBeChecked();
    expect(within(grid).getByLabelText("step 3 (EMA)")).toBeChecked();
    await userEvent.click(within(grid).getByRole("button", { name: /Render grid \(4 images/ }));
    await waitFor(() => expect(within(grid).getAllByRole("img")).toHaveLength(4));
    const sent = calls.filter((c) => c.url === "/api/generations").map((c) => (c.body as Record<string, unknown>).loras);
    expect(sent).toEqual([
      [{ name: "cats", scale: 1, step: 3 }],
      [{ name: "cats", scale: 1, step: 3, weights: "ema" }],
      [{ name: "cats", scale: 1, step: 6 }],
      [{ name: "cats", scale: 1 }],
    ]);
  });

  it("renders its form without two siblings of one key (the base model and the references were both keyed by the family)", async () => {
    // RELIABILITY 285: React warned "two children with the same key" on every render
    const logged = vi.spyOn(console, "error").mockImplementation(() => undefined);
    try {
      renderScreen();
      await screen.findByTestId("gallery");
      await userEvent.click(screen.getByRole("radio", { name: "Stable Diffusion XL" }));
      await userEvent.click(screen.getByRole("radio", { name: "FLUX.1" }));
      expect(logged.mock.calls.map((c) => String(c[0])).filter((m) => m.includes("same key"))).toEqual([]);
    } finally {
      logged.mockRestore();
    }
  });
});
