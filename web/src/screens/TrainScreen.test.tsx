import { render, screen, waitFor } from "@testing-library/react";
import userEvent from "@testing-library/user-event";
import { beforeEach, describe, expect, it, vi } from "vitest";
import { InfoProvider } from "../api/info";
import { TrainingProvider } from "../api/training";
import { CONFIG_DESCRIPTIONS } from "../api/trainConfig.gen";
import type { Info } from "../api/types";
import { FAMILY_FIELDS, FIELD_KINDS } from "../lib/trainForm";
import { CATALOGUE, type Call, INFO, mockFetch } from "../test/fixtures";
import { TrainScreen } from "./TrainScreen";

const STATUS = { job: null, queue: [], busy: false, event_seq: 0 };
let info: Info = INFO;

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
    info = INFO;
    calls = mockFetch(({ method, url, body }) => {
      if (url === "/api/info") return { body: info };
      if (url === "/api/models") return { body: CATALOGUE };
      if (url.startsWith("/api/train/status")) return { body: STATUS };
      if (method === "POST" && url === "/api/train/preflight") {
        const cfg = (body as { config: Record<string, unknown> }).config;
        if (cfg.cache_variants === 3) {
          return {
            status: 400,
            body: {
              error: "ConfigError",
              detail: "invalid configuration",
              problems: [{ field: "cache_variants", message: "> 1 needs random_crop or random_flip" }],
            },
          };
        }
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
        if (cfg.micro_batch_size === 3) {
          return {
            status: 400,
            body: {
              error: "ConfigError",
              detail: "invalid configuration",
              problems: [{ field: "micro_batch_size", message: "batch_size (1) must be a multiple of it" }],
            },
          };
        }
        const budget = (cfg.memory_budget_gb as number | undefined) ?? null;
        const source = (name: string) => (name in cfg && cfg[name] !== "auto" ? "settings" : budget != null ? "budget" : "default");
        const defaults: Record<string, string | number> = { base_precision: "fp32", gradient_checkpointing: "off", offload_blocks: 0, micro_batch_size: 1 };
        return {
          body: {
            config: cfg,
            plan: {
              memory_budget_gb: budget,
              decided_by: budget != null ? "measured" : "settings",
              compile: cfg.compile === "wide",
              compile_shapes: cfg.compile === "wide" ? 3 : null,
              fuse_projections: cfg.fuse_projections === "on" ? true : budget != null ? null : false,
              fields: Object.entries(defaults).map(([name, d]) => ({
                name,
                requested: (cfg[name] as string | number | undefined) ?? null,
                value: source(name) === "budget" ? null : source(name) === "settings" ? cfg[name] : d,
                source: source(name),
              })),
            },
            dataset: { path: "/d", images_found: 9, images_used: 8, dropped: [{ file: "bad.png", reason: "cannot decode" }], missing_captions: [], caption_sources: {}, unique_captions: 8, buckets: { "512x512": 8 } },
            schedule: { steps: 40, epochs: 5, steps_per_epoch: 8, batch_size: 1, grad_accum: 1 },
            precision: { requested: "auto", base_dtype: "fp32", lora_dtype: "fp32", device: "cpu", tf32: false, gradient_checkpointing: "auto" },
            memory: { estimated_gb: 1.25, phases: null, note: "rough", lightest_gb: budget != null ? 0.75 : null },
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

  it("has an input for every TrainConfig field (family-specific ones for the families that use them)", async () => {
    renderTrain();
    await waitFor(() => expect(input("lora_rank")).toHaveValue("32"));
    const missing = (family: (typeof INFO.families)[number]) =>
      (Object.keys(FIELD_KINDS) as (keyof typeof FIELD_KINDS)[]).filter((key) => {
        if (FIELD_KINDS[key] === "length" || key === "family") return false;
        if ((FAMILY_FIELDS as readonly string[]).includes(key) && !family.supports.includes(key)) return false;
        return document.querySelector(`[name="${key}"]`) === null;
      });
    expect(missing(INFO.families[1])).toEqual([]);
    await userEvent.click(screen.getByRole("radio", { name: "Stable Diffusion XL" }));
    expect(missing(INFO.families[0])).toEqual([]);
    // the length input stands for steps / num_epochs; the radio group for the family
    expect(input("length")).not.toBeNull();
    expect(screen.getByRole("radio", { name: "Stable Diffusion XL" })).toHaveAttribute("aria-checked", "true");
  });

  it("shows seed, checkpoint interval and compile up front; compile=on only with CUDA", async () => {
    renderTrain();
    await waitFor(() => expect(input("lora_rank")).toHaveValue("32"));
    for (const key of ["seed", "save_every", "keep_last", "compile", "lora_format"]) {
      expect(input(key).closest("details")).toBeNull();
    }
    expect(input("compile")).toHaveValue("auto");
    const on = screen.getByRole("option", { name: "On" }) as HTMLOptionElement;
    expect(on.disabled).toBe(true);
    expect(input("compile").closest("label")).toHaveTextContent("On / Wide need a CUDA GPU");
  });

  it("offers the attention kernel next to Compile, auto by default; cuDNN and memory-efficient only with CUDA", async () => {
    renderTrain();
    await waitFor(() => expect(input("lora_rank")).toHaveValue("32"));
    const attention = input("attention_backend");
    expect(attention.closest("details")).toBeNull(); // up front, in Memory and speed
    expect(attention.closest(".card")).toBe(input("compile").closest(".card"));
    expect(attention).toHaveValue("auto");
    expect(attention.closest("label")).toHaveTextContent("Attention");
    expect(attention.closest("label")).toHaveAttribute("title", CONFIG_DESCRIPTIONS.attention_backend);
    const options = [...(attention as unknown as HTMLSelectElement).options];
    expect(options.map((o) => o.value)).toEqual(["auto", "cudnn", "flash", "efficient", "math"]);
    expect(options.filter((o) => o.disabled).map((o) => o.value)).toEqual(["cudnn", "efficient"]);
    expect(screen.getByRole("option", { name: "Math (slow)" })).toBeEnabled();
    expect(attention.closest("label")).toHaveTextContent("auto = torch's default here; cuDNN and memory-efficient need a CUDA GPU (this host: cpu)");

    await userEvent.click(screen.getByRole("button", { name: "Check" }));
    await screen.findByTestId("preflight");
    let sent = (calls.filter((c) => c.url === "/api/train/preflight").pop()?.body as { config: Record<string, unknown> }).config;
    expect(sent.attention_backend).toBe("auto");
    expect(screen.getByTestId("preflight-attention")).toHaveTextContent("Attention: auto (chosen at start)");

    await userEvent.selectOptions(attention, "math");
    await userEvent.click(screen.getByRole("button", { name: "Check" }));
    await screen.findByTestId("preflight");
    sent = (calls.filter((c) => c.url === "/api/train/preflight").pop()?.body as { config: Record<string, unknown> }).config;
    expect(sent.attention_backend).toBe("math");
    expect(screen.getByTestId("preflight-attention")).toHaveTextContent("Attention: math");
  });

  it("offers compile=wide for SDXL on a CUDA host and says how many batch shapes it compiles", async () => {
    info = { ...INFO, host: { device: "cuda", name: "NVIDIA H200", memory_gb: 139.8, precisions: ["auto", "fp32", "bf16"], gpu_count: 1 } };
    renderTrain();
    await waitFor(() => expect(input("lora_rank")).toHaveValue("32"));
    const wide = () => screen.getByRole("option", { name: "Wide (SDXL)" }) as HTMLOptionElement;
    expect(wide().disabled).toBe(true); // FLUX.1
    await userEvent.click(screen.getByRole("radio", { name: "Stable Diffusion XL" }));
    expect(wide().disabled).toBe(false);
    await userEvent.type(input("base_model"), "stabilityai/stable-diffusion-xl-base-1.0");
    await userEvent.selectOptions(input("compile"), "wide");
    await userEvent.click(screen.getByRole("button", { name: "Check" }));
    await screen.findByTestId("preflight");
    const sent = calls.filter((c) => c.url === "/api/train/preflight").pop()?.body as { config: Record<string, unknown> };
    expect(sent.config.compile).toBe("wide");
    expect(screen.getByTestId("preflight-compile")).toHaveTextContent("compiled (wide): 3 batch shapes to compile, ~2 min each the first time");
  });

  it("offers every attention kernel on a CUDA host and keeps the choice across a family switch", async () => {
    info = { ...INFO, host: { device: "cuda", name: "NVIDIA H200", memory_gb: 139.8, precisions: ["auto", "fp32", "bf16"], gpu_count: 1 } };
    renderTrain();
    await waitFor(() => expect(input("lora_rank")).toHaveValue("32"));
    const options = [...(input("attention_backend") as unknown as HTMLSelectElement).options];
    expect(options.filter((o) => o.disabled)).toEqual([]);
    expect(input("attention_backend").closest("label")).toHaveTextContent("auto = cuDNN for transformers when a probe at the run's shapes passes, else flash");
    expect(input("attention_backend").closest("label")).not.toHaveTextContent("need a CUDA GPU");
    await userEvent.selectOptions(input("attention_backend"), "cudnn");
    await userEvent.click(screen.getByRole("button", { name: "Check" }));
    await screen.findByTestId("preflight");
    const sent = calls.find((c) => c.url === "/api/train/preflight")?.body as { config: Record<string, unknown> };
    expect(sent.config.attention_backend).toBe("cudnn");
    expect(screen.getByTestId("preflight-attention")).toHaveTextContent("Attention: cudnn");
    await userEvent.click(screen.getByRole("radio", { name: "Stable Diffusion XL" }));
    expect(input("lora_rank")).toHaveValue("16");
    expect(input("attention_backend")).toHaveValue("cudnn");
  });

  it("offers fused projections next to Attention, auto by default; Fused only for families that have them", async () => {
    renderTrain();
    await waitFor(() => expect(input("lora_rank")).toHaveValue("32"));
    const fuse = input("fuse_projections");
    expect(fuse.closest("details")).toBeNull(); // up front, in Memory and speed
    expect(fuse.closest(".card")).toBe(input("attention_backend").closest(".card"));
    expect(fuse).toHaveValue("auto");
    expect(fuse.closest("label")).toHaveAttribute("title", CONFIG_DESCRIPTIONS.fuse_projections);
    const fused = () => screen.getByRole("option", { name: "Fused" }) as HTMLOptionElement;
    expect(fused().disabled).toBe(false); // FLUX.1
    await userEvent.selectOptions(fuse, "on");
    await userEvent.click(screen.getByRole("button", { name: "Check" }));
    await screen.findByTestId("preflight");
    const sent = calls.filter((c) => c.url === "/api/train/preflight").pop()?.body as { config: Record<string, unknown> };
    expect(sent.config.fuse_projections).toBe("on");
    expect(screen.getByTestId("preflight-fuse")).toHaveTextContent("projections fused");
    expect(screen.getByTestId("preflight-fuse")).toHaveAttribute("title", CONFIG_DESCRIPTIONS.fuse_projections);
    await userEvent.click(screen.getByRole("radio", { name: "Stable Diffusion XL" }));
    expect(fused().disabled).toBe(true); // the U-Net has nothing to fuse: the server would refuse "on"
    expect(input("fuse_projections")).toHaveValue("auto");
    expect(input("fuse_projections").closest("label")).toHaveTextContent("Stable Diffusion XL has no projections to fuse");
  });

  it("offers compile=on on a CUDA host", async () => {
    info = { ...INFO, host: { device: "cuda", name: "NVIDIA H200", memory_gb: 139.8, precisions: ["auto", "fp32", "bf16"], gpu_count: 1 } };
    renderTrain();
    await waitFor(() => expect(input("lora_rank")).toHaveValue("32"));
    expect((screen.getByRole("option", { name: "On" }) as HTMLOptionElement).disabled).toBe(false);
    expect((screen.getByRole("option", { name: "Wide (SDXL)" }) as HTMLOptionElement).disabled).toBe(true); // FLUX.1: no wide regions
    await userEvent.selectOptions(input("compile"), "on");
    await userEvent.click(screen.getByRole("button", { name: "Check" }));
    await screen.findByTestId("preflight");
    const sent = calls.find((c) => c.url === "/api/train/preflight")?.body as { config: Record<string, unknown> };
    expect(sent.config.compile).toBe("on");
  });

  it("sends the checkpoint, format and advanced settings the user set", async () => {
    renderTrain();
    await waitFor(() => expect(input("lora_rank")).toHaveValue("32"));
    await userEvent.type(input("save_every"), "100");
    await userEvent.clear(input("keep_last"));
    await userEvent.type(input("keep_last"), "4");
    await userEvent.clear(input("seed"));
    await userEvent.type(input("seed"), "7");
    await userEvent.selectOptions(input("compile"), "off");
    await userEvent.selectOptions(input("lora_format"), "kohya");
    await userEvent.click(screen.getByText("Advanced settings"));
    await userEvent.type(input("lora_targets"), "to_q, to_v");
    await userEvent.clear(input("max_grad_norm"));
    await userEvent.click(screen.getByRole("button", { name: "Check" }));
    await screen.findByTestId("preflight");
    const sent = calls.find((c) => c.url === "/api/train/preflight")?.body as { config: Record<string, unknown> };
    expect(sent.config).toMatchObject({
      save_every: 100,
      keep_last: 4,
      seed: 7,
      compile: "off",
      lora_format: "kohya",
      lora_targets: ["to_q", "to_v"],
      max_grad_norm: null,
    });
  });

  it("opens the advanced settings when the server refuses one of them", async () => {
    renderTrain();
    await waitFor(() => expect(input("lora_rank")).toHaveValue("32"));
    const details = input("cache_variants").closest("details") as HTMLDetailsElement;
    expect(details.open).toBe(false);
    // typed while collapsed is impossible for a user; set it the way the form would
    details.open = true;
    await userEvent.type(input("cache_variants"), "3");
    details.open = false;
    await userEvent.click(screen.getByRole("button", { name: "Check" }));
    await waitFor(() => expect(input("cache_variants").closest("label")).toHaveTextContent("needs random_crop"));
    expect(details.open).toBe(true);
  });
  it("offers the memory plan: the host's precisions, checkpointing modes, auto blanks, GPUs off on a CPU host", async () => {
    renderTrain();
    await waitFor(() => expect(input("lora_rank")).toHaveValue("32"));
    const options = (name: string) => [...(input(name) as unknown as HTMLSelectElement).options].map((o) => o.value);
    expect(options("base_precision")).toEqual(["auto", "fp32", "bf16", "int8", "nf4"]); // no fp16 / fp8 on this CPU
    expect(input("base_precision").closest("label")).toHaveAttribute("title", CONFIG_DESCRIPTIONS.base_precision);
    expect(input("base_precision").closest("label")).toHaveTextContent("this host runs auto, fp32, bf16, int8, nf4");
    expect(screen.getByRole("option", { name: "nf4 (4-bit base, QLoRA)" })).toBeInTheDocument();
    expect(options("gradient_checkpointing")).toEqual(["auto", "off", "selective", "full"]);
    expect(input("gradient_checkpointing")).toHaveValue("auto");
    for (const name of ["offload_blocks", "micro_batch_size", "memory_budget_gb"]) {
      expect(input(name)).toHaveValue("");
      expect(input(name).closest("details")).toBeNull(); // up front, not in the advanced settings
    }
    expect(input("offload_blocks")).toHaveAttribute("placeholder", "auto");
    expect(input("memory_budget_gb").closest("label")).toHaveTextContent("needs a CUDA GPU");
    expect(input("num_gpus")).toBeDisabled();
    expect(input("num_gpus").closest("label")).toHaveTextContent("needs CUDA GPUs; this host has none");

    await userEvent.click(screen.getByRole("button", { name: "Check" }));
    await screen.findByTestId("preflight");
    let sent = (calls.filter((c) => c.url === "/api/train/preflight").pop()?.body as { config: Record<string, unknown> }).config;
    expect(sent).toMatchObject({ base_precision: "auto", gradient_checkpointing: "auto", num_gpus: 1 });
    for (const key of ["offload_blocks", "micro_batch_size", "memory_budget_gb"]) expect(sent).not.toHaveProperty(key);
    expect(screen.getByTestId("preflight-plan")).toHaveTextContent("Precision: fp32 (default)");

    await userEvent.selectOptions(input("base_precision"), "nf4");
    await userEvent.selectOptions(input("gradient_checkpointing"), "selective");
    await userEvent.type(input("memory_budget_gb"), "20");
    await userEvent.click(screen.getByRole("button", { name: "Check" }));
    const plan = await screen.findByTestId("preflight-plan");
    sent = (calls.filter((c) => c.url === "/api/train/preflight").pop()?.body as { config: Record<string, unknown> }).config;
    expect(sent).toMatchObject({ base_precision: "nf4", gradient_checkpointing: "selective", memory_budget_gb: 20 });
    expect(plan).toHaveTextContent("Precision: nf4");
    expect(plan).toHaveTextContent("Blocks offloaded: measured at start");
    expect(plan).toHaveTextContent("Micro-batch: measured at start");
    expect(screen.getByTestId("preflight")).toHaveTextContent("1.25 GB down to 0.75 GB");
    expect(screen.getByTestId("preflight")).toHaveTextContent("fits the 20.0 GB budget");
  });

  it("offers GPUs up to the host's count and shows the card's memory as the budget hint", async () => {
    info = { ...INFO, host: { device: "cuda", name: "NVIDIA H200", memory_gb: 139.8, precisions: ["auto", "fp32", "bf16"], gpu_count: 4 } };
    renderTrain();
    await waitFor(() => expect(input("lora_rank")).toHaveValue("32"));
    expect(input("num_gpus")).toBeEnabled();
    expect(input("num_gpus")).toHaveAttribute("max", "4");
    expect(input("num_gpus").closest("label")).toHaveTextContent("up to 4 on this host");
    expect(input("memory_budget_gb").closest("label")).toHaveTextContent("this GPU has 139.8 GB");
    await userEvent.clear(input("num_gpus"));
    await userEvent.type(input("num_gpus"), "2");
    await userEvent.type(input("offload_blocks"), "4");
    await userEvent.click(screen.getByRole("button", { name: "Check" }));
    await screen.findByTestId("preflight");
    const sent = (calls.find((c) => c.url === "/api/train/preflight")?.body as { config: Record<string, unknown> }).config;
    expect(sent).toMatchObject({ num_gpus: 2, offload_blocks: 4 });
  });

  it("greys out the GPUs input on a one-GPU host, saying why", async () => {
    info = { ...INFO, host: { device: "cuda", name: "NVIDIA H200", memory_gb: 139.8, precisions: ["auto", "fp32", "bf16"], gpu_count: 1 } };
    renderTrain();
    await waitFor(() => expect(input("lora_rank")).toHaveValue("32"));
    expect(input("num_gpus")).toBeDisabled();
    expect(input("num_gpus").closest("label")).toHaveTextContent("this host has 1 GPU");
  });

  it("shows the server's problem with a plan setting next to its field", async () => {
    renderTrain();
    await waitFor(() => expect(input("lora_rank")).toHaveValue("32"));
    await userEvent.type(input("micro_batch_size"), "3");
    await userEvent.click(screen.getByRole("button", { name: "Check" }));
    await waitFor(() => expect(input("micro_batch_size").closest("label")).toHaveTextContent("must be a multiple of it"));
    expect(screen.queryByTestId("form-errors")).toBeNull();
    expect(screen.queryByTestId("preflight")).toBeNull();
  });
});
