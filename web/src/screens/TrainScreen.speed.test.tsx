/** The Train screen's "Memory and speed" settings: compile, attention, fused projections, the memory plan, GPUs. */
import { screen, waitFor } from "@testing-library/react";
import userEvent from "@testing-library/user-event";
import { beforeEach, describe, expect, it, vi } from "vitest";
import { CONFIG_DESCRIPTIONS } from "../api/trainConfig.gen";
import type { Info } from "../api/types";
import { type Call, INFO } from "../test/fixtures";
import { cudaInfo, input, mockTrainServer, renderTrain } from "../test/trainServer";

let info: Info = INFO;

describe("TrainScreen: memory and speed", () => {
  let calls: Call[];
  beforeEach(() => {
    vi.unstubAllGlobals();
    info = INFO;
    calls = mockTrainServer(() => info);
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
    expect(options.map((o) => o.value)).toEqual(["auto", "cudnn", "fa4", "flash", "efficient", "math"]);
    expect(options.filter((o) => o.disabled).map((o) => o.value)).toEqual(["cudnn", "fa4", "efficient"]);
    expect(screen.getByRole("option", { name: "Math (slow)" })).toBeEnabled();
    expect(attention.closest("label")).toHaveTextContent("auto = torch's default here; cuDNN, FlashAttention-4 and memory-efficient need a CUDA GPU (this host: cpu)");

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
    info = cudaInfo(1);
    renderTrain();
    await waitFor(() => expect(input("lora_rank")).toHaveValue("32"));
    const wide = () => screen.getByRole("option", { name: "Wide (SDXL)" }) as HTMLOptionElement;
    expect(wide().disabled).toBe(true); // FLUX.1
    await userEvent.click(screen.getByRole("radio", { name: "Stable Diffusion XL" }));
    expect(wide().disabled).toBe(false);
    await userEvent.clear(input("base_model")); // the name in one paste: 40 typed keys re-rendered the form 40 times
    await userEvent.paste("stabilityai/stable-diffusion-xl-base-1.0");
    await userEvent.selectOptions(input("compile"), "wide");
    await userEvent.click(screen.getByRole("button", { name: "Check" }));
    await screen.findByTestId("preflight");
    const sent = calls.filter((c) => c.url === "/api/train/preflight").pop()?.body as { config: Record<string, unknown> };
    expect(sent.config.compile).toBe("wide");
    expect(sent.config.base_model).toBe("stabilityai/stable-diffusion-xl-base-1.0");
    expect(screen.getByTestId("preflight-compile")).toHaveTextContent("compiled (wide): 3 batch shapes to compile, ~2 min each the first time");
  });

  it("offers every attention kernel on a CUDA host and keeps the choice across a family switch", async () => {
    info = cudaInfo(1);
    renderTrain();
    await waitFor(() => expect(input("lora_rank")).toHaveValue("32"));
    const options = [...(input("attention_backend") as unknown as HTMLSelectElement).options];
    expect(options.filter((o) => o.disabled)).toEqual([]);
    expect(input("attention_backend").closest("label")).toHaveTextContent("auto = FlashAttention-4 or cuDNN for transformers when a probe at the run's shapes passes, else flash");
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
    // a server whose SDXL declares no groups (as a plug-in family might): Fused is disabled for it
    info = { ...INFO, families: INFO.families.map((f) => (f.name === "sdxl" ? { ...f, fuse_projections: false } : f)) };
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
    expect(fused().disabled).toBe(true); // nothing to fuse: the server would refuse "on"
    expect(input("fuse_projections")).toHaveValue("auto");
    expect(input("fuse_projections").closest("label")).toHaveTextContent("Stable Diffusion XL has no projections to fuse");
  });

  it("offers compile=on on a CUDA host", async () => {
    info = cudaInfo(1);
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
    info = cudaInfo(4);
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
    info = cudaInfo(1);
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
