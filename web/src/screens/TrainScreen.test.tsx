import { render, screen, waitFor } from "@testing-library/react";
import userEvent from "@testing-library/user-event";
import { beforeEach, describe, expect, it, vi } from "vitest";
import { InfoProvider } from "../api/info";
import { TrainingProvider } from "../api/training";
import { CATALOGUE, type Call, INFO, mockFetch } from "../test/fixtures";
import { TrainScreen } from "./TrainScreen";

const STATUS = { job: null, queue: [], busy: false, event_seq: 0 };

function renderTrain() {
  return render(
    <InfoProvider>
      <TrainingProvider>
        <TrainScreen />
      </TrainingProvider>
    </InfoProvider>,
  );
}

const input = (name: string) => document.querySelector(`[name="${name}"]`) as HTMLInputElement;

describe("TrainScreen", () => {
  let calls: Call[];
  beforeEach(() => {
    vi.unstubAllGlobals();
    calls = mockFetch(({ method, url, body }) => {
      if (url === "/api/info") return { body: INFO };
      if (url === "/api/models") return { body: CATALOGUE };
      if (url.startsWith("/api/train/status")) return { body: STATUS };
      if (method === "POST" && url === "/api/train/preflight") {
        const cfg = (body as { config: Record<string, unknown> }).config;
        if (cfg.lora_rank === 4096) {
          return {
            status: 400,
            body: {
              error: "ConfigError",
              detail: "invalid configuration",
              problems: [
                { field: "lora_rank", message: "Input should be less than or equal to 1024" },
                { field: "data_dir", message: "dataset has no images" },
              ],
            },
          };
        }
        return {
          body: {
            config: cfg,
            dataset: { path: "/d", images_found: 9, images_used: 8, dropped: [{ file: "bad.png", reason: "cannot decode" }], missing_captions: [], caption_sources: {}, unique_captions: 8, buckets: { "512x512": 8 } },
            schedule: { steps: 40, epochs: 5, steps_per_epoch: 8, batch_size: 1, grad_accum: 1 },
            precision: { requested: "auto", base_dtype: "fp32", lora_dtype: "fp32", device: "cpu", tf32: false, gradient_checkpointing: false },
            memory: { estimated_gb: 1.25, phases: null, note: "rough" },
          },
        };
      }
      return undefined;
    });
  });

  it("loads the family defaults, preselects the tiny model and switches defaults with the family", async () => {
    renderTrain();
    await waitFor(() => expect(input("learning_rate")).toHaveValue("0.0004"));
    expect(input("lora_rank")).toHaveValue("32");
    // from the catalogue: the incomplete real model is shown but disabled, so the demo one is chosen
    expect(input("base_model")).toHaveValue(CATALOGUE[0].path);
    const incomplete = screen.getByRole("option", { name: /FLUX.1-dev \(incomplete: transformer/ }) as HTMLOptionElement;
    expect(incomplete.disabled).toBe(true);
    expect(input("data_dir")).toHaveValue("shapes");
    // flux-only setting: present, inside the collapsed advanced section
    expect((input("guidance").closest("details") as HTMLDetailsElement).open).toBe(false);
    await userEvent.click(screen.getByRole("radio", { name: "Stable Diffusion XL" }));
    expect(input("learning_rate")).toHaveValue("0.0001");
    expect(input("lora_rank")).toHaveValue("16");
    expect(input("snr_gamma")).toHaveValue("5");
    expect(document.querySelector('[name="guidance"]')).toBeNull();
  });

  it("the family radio group is one Tab stop and follows the arrow keys", async () => {
    renderTrain();
    await waitFor(() => expect(input("lora_rank")).toHaveValue("32"));
    const flux = screen.getByRole("radio", { name: "FLUX.1" });
    expect(flux).toHaveAttribute("tabindex", "0");
    expect(screen.getByRole("radio", { name: "Stable Diffusion XL" })).toHaveAttribute("tabindex", "-1");
    flux.focus();
    await userEvent.keyboard("{ArrowLeft}");
    const sdxl = screen.getByRole("radio", { name: "Stable Diffusion XL" });
    expect(sdxl).toHaveAttribute("aria-checked", "true");
    expect(sdxl).toHaveFocus();
    expect(input("lora_rank")).toHaveValue("16");
  });

  it("Check sends the config and shows the preflight report", async () => {
    renderTrain();
    await waitFor(() => expect(input("lora_rank")).toHaveValue("32"));
    await userEvent.selectOptions(screen.getByLabelText("length unit"), "epochs");
    await userEvent.clear(input("length"));
    await userEvent.type(input("length"), "5");
    await userEvent.click(screen.getByRole("button", { name: "Check" }));
    const report = await screen.findByTestId("preflight");
    expect(report).toHaveTextContent("bad.png");
    expect(report).toHaveTextContent("1.25 GB");
    const sent = calls.find((c) => c.url === "/api/train/preflight")?.body as { config: Record<string, unknown> };
    expect(sent.config).toMatchObject({ family: "flux", num_epochs: 5, lora_rank: 32, data_dir: "shapes" });
    expect(sent.config).not.toHaveProperty("steps");
  });

  it("shows each 400 problem next to its field", async () => {
    renderTrain();
    await waitFor(() => expect(input("lora_rank")).toHaveValue("32"));
    await userEvent.clear(input("lora_rank"));
    await userEvent.type(input("lora_rank"), "4096");
    await userEvent.click(screen.getByRole("button", { name: "Check" }));
    const rankField = input("lora_rank").closest("label") as HTMLElement;
    await waitFor(() => expect(rankField).toHaveTextContent("less than or equal to 1024"));
    expect(input("data_dir").closest("label")).toHaveTextContent("dataset has no images");
    expect(screen.queryByTestId("preflight")).toBeNull();
  });
});
