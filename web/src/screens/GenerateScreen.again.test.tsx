import { screen, waitFor, within } from "@testing-library/react";
import userEvent from "@testing-library/user-event";
import { beforeEach, describe, expect, it, vi } from "vitest";
import type { SampleImage } from "../api/types";
import { roundTiles, SampleRound, groupByStep } from "../components/SamplePreviews";
import { type Call, INFO, KONTEXT, mockFetch, runDetail } from "../test/fixtures";
import { renderWithProviders } from "../test/render";
import { GenerateScreen } from "./GenerateScreen";

const field = (name: string) => document.querySelector(`[name="${name}"]`) as HTMLInputElement;
const BASE = INFO.models[0].path;
const RUN = { ...runDetail(), config: { ...runDetail().config, base_model: BASE, sample_prompts: ["a blue cat"] } };
/** The listing's entries of run r1 ("portrait"): step 40's raw snapshot renders its preview;
 * step 80's EMA preview has no file (fix 696's note); step 120's renders only approximately. */
const sample = (step: number, extra: Partial<SampleImage>): SampleImage => ({
  step, index: 0, prompt: "a blue cat", name: `step-${String(step).padStart(6, "0")}-0.png`,
  url: `/api/runs/r1/samples/step-${step}-0.png`, references: [], seed: 42, width: 48, height: 32,
  guidance: 3.5, steps: 2, weights: "raw", lora: { name: "portrait", step }, note: null, ...extra,
}); // prettier-ignore
const EMA_NOTE = "this preview shows the EMA weights of step 80, which no file keeps";
const SIZED_NOTE = "its references were sized as the run trains them (control_resolution 'pipeline')";
const REF = "/api/runs/r2/samples/ref-0-0.png";
const SAMPLES = [
  sample(40, { max_sequence_length: 16 }),
  sample(80, { weights: "ema", lora: null, note: EMA_NOTE }),
  sample(120, { lora: { name: "portrait", step: null }, note: SIZED_NOTE }),
  sample(100, { weights: "ema", lora: { name: "portrait", step: 100, weights: "ema" } }),
];

describe("Generate again of a sample preview", () => {
  let calls: Call[];
  beforeEach(() => {
    vi.unstubAllGlobals();
    window.sessionStorage.clear();
    calls = mockFetch(({ method, url }) => {
      if (url === "/api/info") return { body: { ...INFO, families: [...INFO.families, KONTEXT] } };
      if (url === "/api/runs/r2") return { body: { ...RUN, id: "r2", output_name: "edits", family: "flux-kontext" } };
      if (url === "/api/runs/r2/samples?step=2") return { body: { samples: [sample(2, { lora: { name: "edits", step: 2 }, references: [REF], control_resolution: "pipeline", note: SIZED_NOTE })] } };
      if (url === "/api/loras?family=flux-kontext") return { body: { root: "/o", loras: [] } };
      if (method === "POST" && url === "/api/generate/references") {
        return { status: 201, body: { references: [{ id: "u1.png", url: "/gallery/references/u1.png" }] } };
      }
      if (url === REF) return { body: "png bytes" };
      if (url.startsWith("/api/train/status")) return { body: { job: null, queue: [], busy: false, event_seq: 0 } };
      if (url === "/api/runs/r1") return { body: RUN };
      if (url.startsWith("/api/runs/r1/samples?step=")) return { body: { samples: SAMPLES } }; // its round only: the listing is paged
      if (url === "/api/loras?family=flux") {
        return { body: { root: "/o", loras: [{ name: "portrait", family: "flux", path: "/o/portrait/portrait.safetensors", bytes: 2048, modified: 1, sidecar: null }] } };
      }
      if (url === "/api/loras/portrait/steps") {
        const rows = [40, 120].map((s) => ({ step: s, final: s === 120, weights: "raw", path: `/o/${s}`, bytes: 1 }));
        return { body: { name: "portrait", loras: [...rows, { step: 100, final: false, weights: "ema", path: "/o/c100", bytes: 1 }] } };
      }
      if (url === "/api/gallery") return { body: { images: [] } };
      if (method === "POST" && url === "/api/generations") return { status: 201, body: { file: "new.png" } };
      return undefined;
    });
  });

  it("a preview offers Generate again where a file renders it, and says why not where none does", () => {
    renderWithProviders(
      <>
        {groupByStep(SAMPLES).map((r) => (
          <SampleRound key={r.step} runId="r1" step={r.step} tiles={r.tiles} />
        ))}
      </>,
    );
    const link = (step: number) => within(screen.getByTestId(`samples-step-${step}`)).queryByRole("link", { name: /Generate again/ });
    expect(link(40)).toHaveAttribute("href", "#/again/r1/40/0");
    // no file keeps step 80's EMA weights: no action, the note instead
    expect(link(80)).toBeNull();
    expect(within(screen.getByTestId("samples-step-80")).getByTestId("again-note")).toHaveTextContent(`Generate cannot render it again: ${EMA_NOTE}`);
    // rendered only approximately: the action, with the note beside it
    expect(link(120)).toHaveAttribute("href", "#/again/r1/120/0");
    expect(within(screen.getByTestId("samples-step-120")).getByTestId("again-note")).toHaveTextContent(`not the same pixels: ${SIZED_NOTE}`);
  });

  it("fills the form with the preview's settings and sends them, leaving the tab's draft alone", async () => {
    window.sessionStorage.setItem("lorastudio.draft.generate", JSON.stringify({ family: "flux", prompt: "my own prompt", seed: "9" }));
    const first = renderWithProviders(<GenerateScreen fromSample={{ runId: "r1", step: 40, index: 0 }} />);
    expect(await screen.findByTestId("again-from")).toHaveTextContent("Settings of the step 40 preview of prompt 1 of run portrait: Generate renders it again.");
    expect(screen.getByTestId("again-from")).toHaveTextContent("The form you had here is kept");
    expect(field("prompt")).toHaveValue("a blue cat");
    expect([field("gen_seed"), field("gen_steps"), field("gen_width"), field("gen_height")].map((f) => f.value)).toEqual(["42", "2", "48", "32"]);
    // the run's text length (its previews read the prompt to it): the advanced settings open on it
    expect(field("gen_max_sequence_length")).toHaveValue("16");
    expect(screen.getByTestId("generate-advanced")).toHaveAttribute("open");
    // the step's snapshot, at strength 1: ticked, not called missing (the list has final files only)
    expect(await screen.findByLabelText("use LoRA portrait (raw, step 40)")).toBeChecked();
    expect(screen.getByLabelText("scale of portrait (raw, step 40)")).toHaveValue("1");
    expect(screen.queryByTestId("missing-loras")).toBeNull();
    await userEvent.click(screen.getByRole("button", { name: "Generate" }));
    await waitFor(() => expect(calls.some((c) => c.method === "POST" && c.url === "/api/generations")).toBe(true));
    const sent = calls.find((c) => c.method === "POST" && c.url === "/api/generations")?.body;
    expect(sent).toMatchObject({
      family: "flux", base_model: BASE, prompt: "a blue cat", seed: 42, steps: 2, width: 48, height: 32, guidance: 3.5,
      negative_prompt: null, max_sequence_length: 16, loras: [{ name: "portrait", scale: 1, step: 40 }],
    }); // prettier-ignore
    first.unmount();
    // the Generate tab still opens the draft the user had
    renderWithProviders(<GenerateScreen />);
    await screen.findByRole("button", { name: "Generate" });
    expect(field("prompt")).toHaveValue("my own prompt");
    expect(field("gen_seed")).toHaveValue("9");
  });

  it("picks the EMA weights a checkpoint kept for an EMA preview of its step", async () => {
    renderWithProviders(<GenerateScreen fromSample={{ runId: "r1", step: 100, index: 0 }} />);
    expect(await screen.findByTestId("again-from")).toHaveTextContent("Generate renders it again.");
    // listed as that step's EMA file (its checkpoint's), ticked, not called missing
    expect(await screen.findByLabelText("use LoRA portrait (EMA, step 100)")).toBeChecked();
    expect(screen.queryByTestId("missing-loras")).toBeNull();
    await userEvent.click(screen.getByRole("button", { name: "Generate" }));
    await waitFor(() => expect(calls.some((c) => c.method === "POST" && c.url === "/api/generations")).toBe(true));
    expect(calls.find((c) => c.method === "POST" && c.url === "/api/generations")?.body).toMatchObject({
      loras: [{ name: "portrait", scale: 1, step: 100, weights: "ema" }],
    });
  });

  it("says the note instead of filling the form where no file keeps the preview's weights", async () => {
    renderWithProviders(<GenerateScreen fromSample={{ runId: "r1", step: 80, index: 0 }} />);
    expect(await screen.findByTestId("again-note")).toHaveTextContent(`Generate cannot render the step 80 preview of prompt 1 of run portrait again: ${EMA_NOTE}`);
    await screen.findByRole("button", { name: "Generate" });
    expect(field("prompt")).not.toHaveValue("a blue cat");
    expect(screen.queryByLabelText(/use LoRA portrait \(raw, step 80\)/)).toBeNull();
  });

  it("fills the form of an approximate preview and says it will not render the same pixels", async () => {
    renderWithProviders(<GenerateScreen fromSample={{ runId: "r1", step: 120, index: 0 }} />);
    const banner = await screen.findByTestId("again-from");
    expect(banner).toHaveTextContent(`Generate will not render the same pixels: ${SIZED_NOTE}`);
    expect(await screen.findByLabelText("use LoRA portrait")).toBeChecked();
    expect(field("prompt")).toHaveValue("a blue cat");
  });

  it("a live round asks for the listing on the click: opens Generate again, or says why not", async () => {
    window.location.hash = "#/live";
    const tiles = (step: number) => roundTiles("r1", [`samples/step-${step}-0.png`], ["a blue cat"]);
    renderWithProviders(
      <>
        <SampleRound live runId="r1" step={40} tiles={tiles(40)} />
        <SampleRound live runId="r1" step={80} tiles={tiles(80)} />
      </>,
    );
    expect(calls.some((c) => c.url.startsWith("/api/runs/r1/samples"))).toBe(false); // nothing asked before a click
    await userEvent.click(within(screen.getByTestId("samples-step-80")).getByRole("button", { name: /Generate again/ }));
    expect(await within(screen.getByTestId("samples-step-80")).findByTestId("again-note")).toHaveTextContent(EMA_NOTE);
    expect(window.location.hash).toBe("#/live");
    await userEvent.click(within(screen.getByTestId("samples-step-40")).getByRole("button", { name: /Generate again/ }));
    await waitFor(() => expect(window.location.hash).toBe("#/again/r1/40/0"));
  });

  it("hands an edit preview's reference images over as Generate's references", async () => {
    renderWithProviders(<GenerateScreen fromSample={{ runId: "r2", step: 2, index: 0 }} />);
    const banner = await screen.findByTestId("again-from");
    const field = await screen.findByTestId("reference-images");
    // the run's control_resolution goes with them (below): not "will not render the same pixels" (RELIABILITY 1652)
    expect(banner).toHaveTextContent("edits");
    expect(banner).not.toHaveTextContent("same pixels");
    expect(within(field).getByRole("img")).toHaveAttribute("src", "/gallery/references/u1.png");
    const posted = calls.filter((c) => c.url === "/api/generate/references");
    expect(posted.map((c) => (c.body as FormData).getAll("files").map((f) => (f as File).name))).toEqual([["ref-0-0.png"]]);
    await userEvent.click(screen.getByRole("button", { name: "Generate" }));
    await waitFor(() => expect(calls.some((c) => c.method === "POST" && c.url === "/api/generations")).toBe(true));
    expect(calls.find((c) => c.method === "POST" && c.url === "/api/generations")?.body).toMatchObject({
      family: "flux-kontext", references: ["u1.png"], loras: [{ name: "edits", scale: 1, step: 2 }],
      control_resolution: "pipeline", // sized as the run sized them (RELIABILITY 1652)
    }); // prettier-ignore
  });
});
