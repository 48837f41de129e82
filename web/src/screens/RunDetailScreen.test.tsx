import { render, screen, waitFor, within } from "@testing-library/react";
import userEvent from "@testing-library/user-event";
import { afterEach, describe, expect, it, vi } from "vitest";
import type { CheckpointList, RunDetail } from "../api/types";
import { mockFetch, runDetail } from "../test/fixtures";
import { RunDetailScreen } from "./RunDetailScreen";

const OUT = "/home/u/.lorastudio/outputs/portrait";
const RUN: RunDetail = runDetail(OUT);
const CHECKPOINTS: CheckpointList = {
  checkpoints: [80, 120].map((step) => ({ name: `step-${step}`, step, path: `${OUT}/checkpoints/step-${step}` })),
  resume_step: 120,
};

const LOG = {
  lines: ["2025-01-01 INFO lorastudio.worker: model_load_started: {}", "Traceback (most recent call last):"],
  truncated: true,
  size_bytes: 4096,
  note: null as string | null,
};

function serve(run: RunDetail, checkpoints: CheckpointList, resume?: { status: number; body: unknown }, log = LOG) {
  return mockFetch(({ url }) => {
    if (url === "/api/runs/r1") return { body: run };
    if (url === "/api/runs/r1/samples") return { body: { samples: [] } };
    if (url === "/api/runs/r1/checkpoints") return { body: checkpoints };
    if (url === "/api/runs/r1/loras") {
      const snap = (step: number) => ({ step, final: false, path: `${OUT}/loras/portrait-step-000${step}.safetensors`, url: `/api/loras/portrait/file?step=${step}` });
      return { body: { name: "portrait", loras: [snap(80), snap(120), { step: 120, final: true, path: `${OUT}/portrait.safetensors`, url: "/api/loras/portrait/file" }] } };
    }
    if (url.startsWith("/api/runs/r1/log?")) return { body: log };
    if (url === "/api/runs/r1/resume") return resume ?? { status: 201, body: { id: "j2", status: "queued" } };
    return undefined;
  });
}

afterEach(() => vi.unstubAllGlobals());

describe("RunDetailScreen", () => {
  it("lists the run's checkpoints with their steps and resumes from the picked one", async () => {
    const calls = serve(RUN, CHECKPOINTS);
    render(<RunDetailScreen id="r1" />);
    const card = await screen.findByTestId("checkpoints");
    await waitFor(() => expect(within(card).getAllByRole("listitem")).toHaveLength(2));
    const items = within(card).getAllByRole("listitem").map((li) => li.textContent);
    expect(items[0]).toContain("step 120");
    expect(items[0]).toContain("newest");
    expect(items[1]).toContain("step 80");
    await userEvent.selectOptions(within(card).getByRole("combobox", { name: "checkpoint to resume from" }), "step-80");
    await userEvent.click(within(card).getByRole("button", { name: "Resume from 80: portrait" }));
    await waitFor(() => expect(window.location.hash).toBe("#/live"));
    const resume = calls.find((c) => c.url === "/api/runs/r1/resume");
    expect(resume).toMatchObject({ method: "POST", body: { checkpoint: "step-80" } });
    expect(screen.getByRole("link", { name: "Download LoRA" })).toHaveAttribute("href", "/api/loras/portrait/file");
    // the sidecar (resolved config, loader checks) downloads beside it (session 38 journey)
    expect(screen.getByRole("link", { name: "Sidecar .json" })).toHaveAttribute("href", "/api/loras/portrait/sidecar");
    expect(screen.getByRole("button", { name: "Push to hub: portrait" })).toBeInTheDocument();
    // Resume and Train longer come before the LoRAs by step and the log (a phone scrolled past both: RELIABILITY 1411)
    const later = [await screen.findByTestId("lora-steps"), screen.getByLabelText("run log")];
    for (const el of later) expect(card.compareDocumentPosition(el) & Node.DOCUMENT_POSITION_FOLLOWING).toBeTruthy();
  });

  it("lists the run's LoRAs by step, each downloadable", async () => {
    serve(RUN, CHECKPOINTS);
    render(<RunDetailScreen id="r1" />);
    const card = await screen.findByTestId("lora-steps");
    const links = within(card).getAllByRole("link");
    expect(links.map((a) => a.textContent)).toEqual(["step 80", "step 120", "final (step 120)"]);
    expect(links[0]).toHaveAttribute("href", "/api/loras/portrait/file?step=80");
    expect(within(card).getByText("portrait-step-00080.safetensors")).toBeInTheDocument();
  });

  it("charts the validation loss beside the training loss and marks the best and last LoRA", async () => {
    const validation = [
      { step: 1, loss: 0.3 },
      { step: 3, loss: 0.35 },
    ];
    mockFetch(({ url }) => {
      if (url === "/api/runs/r1") return { body: { ...RUN, validation } };
      if (url === "/api/runs/r1/loras") {
        const lora = (step: number, final: boolean, loss: number, marks: object) => ({
          step, final, path: `${OUT}/${step}-${final}.safetensors`, url: `/x/${step}`, validation_loss: loss, best: false, last: false, ...marks,
        });
        return { body: { name: "portrait", loras: [lora(1, false, 0.3, { best: true }), lora(3, true, 0.35, { last: true })] } };
      }
      if (url === "/api/runs/r1/samples") return { body: { samples: [] } };
      if (url === "/api/runs/r1/checkpoints") return { body: CHECKPOINTS };
      return undefined;
    });
    render(<RunDetailScreen id="r1" />);
    const chart = await screen.findByTestId("chart");
    expect(chart).toHaveAttribute("data-points", "3"); // steps 1, 2 (training) and 3 (validation)
    const val = chart.querySelector('path[data-series="val loss"]');
    expect(val?.getAttribute("d")).toMatch(/^M[\d.]+,[\d.]+L[\d.]+,[\d.]+$/); // one line through both rounds
    const loss = chart.querySelector('path[data-series="loss"]');
    expect(loss?.getAttribute("d")).toMatch(/^M[\d.]+,[\d.]+L[\d.]+,[\d.]+$/);
    const card = await screen.findByTestId("lora-steps");
    const items = within(card).getAllByRole("listitem");
    expect(within(items[0]).getByTestId("lora-best")).toBeInTheDocument();
    expect(items[0]).toHaveTextContent("val 0.3");
    expect(within(items[1]).getByTestId("lora-last")).toBeInTheDocument();
    expect(within(items[1]).queryByTestId("lora-best")).toBeNull();
  });

  it("labels an EMA run's files ema / raw and marks the raw file validation measured", async () => {
    mockFetch(({ url }) => {
      if (url === "/api/runs/r1") return { body: { ...RUN, validation: [{ step: 2, loss: 0.4 }, { step: 4, loss: 0.3 }] } };
      if (url === "/api/runs/r1/loras") {
        const row = (step: number, final: boolean, file: string, weights: string, extra: object) => ({
          step, final, weights, path: `${OUT}/${file}`, url: `/api/loras/portrait/file${final && weights === "ema" ? "" : `?step=${step}`}`,
          validation_loss: null, best: false, last: false, ...extra,
        });
        const loras = [
          row(2, false, "loras/portrait-step-000002.safetensors", "raw", { validation_loss: 0.4 }),
          row(4, true, "portrait.raw.safetensors", "raw", { validation_loss: 0.3, best: true, last: true }),
          row(4, true, "portrait.safetensors", "ema", {}),
        ];
        return { body: { name: "portrait", loras } };
      }
      if (url === "/api/runs/r1/samples") return { body: { samples: [] } };
      if (url === "/api/runs/r1/checkpoints") return { body: CHECKPOINTS };
      return undefined;
    });
    render(<RunDetailScreen id="r1" />);
    const card = await screen.findByTestId("lora-steps");
    const items = within(card).getAllByRole("listitem");
    expect(items.map((li) => within(li).getByTestId("lora-weights").textContent)).toEqual(["raw", "raw", "EMA"]);
    expect(within(items[1]).getByTestId("lora-best")).toBeInTheDocument();
    expect(items[1]).toHaveTextContent("val 0.3");
    expect(within(items[1]).getByRole("link")).toHaveAttribute("href", "/api/loras/portrait/file?step=4");
    expect(within(items[2]).queryByTestId("lora-best")).toBeNull();
    expect(items[2]).not.toHaveTextContent("val");
    expect(within(items[2]).getByRole("link", { name: "final (step 4): download the EMA LoRA of step 4" })).toHaveAttribute(
      "href",
      "/api/loras/portrait/file",
    );
  });

  it("shows a refused resume beside the Resume button (not a screen's height above it), the run staying on screen", async () => {
    serve(RUN, CHECKPOINTS, {
      status: 400,
      body: { error: "ConfigError", detail: "data_dir: the dataset changed since the checkpoint", problems: [] },
    });
    render(<RunDetailScreen id="r1" />);
    const card = await screen.findByTestId("checkpoints");
    await userEvent.click(await within(card).findByRole("button", { name: /^Resum(e from [0-9]+|ing): portrait/ }));
    expect(await within(card).findByRole("alert")).toHaveTextContent("the dataset changed");
    expect(screen.getAllByRole("alert")).toHaveLength(1);
  });

  it("says a refused Train longer total under its input, until it is edited", async () => {
    const done = { ...RUN, status: "completed" as const, steps_run: 1000, resume_step: null, train_longer: { from_step: 120, steps: 1000 } };
    serve(done, { ...CHECKPOINTS, resume_step: null }, {
      status: 400,
      body: { error: "ConfigError", detail: "invalid configuration (1 problem(s)):\n  - steps: Input should be less than or equal to 10000000", problems: [{ field: "steps", message: "Input should be less than or equal to 10000000" }] },
    });
    render(<RunDetailScreen id="r1" />);
    const card = await screen.findByTestId("checkpoints");
    await userEvent.click(await within(card).findByRole("button", { name: "Train longer: portrait" }));
    const input = within(card).getByRole("spinbutton", { name: "New total steps" });
    await userEvent.clear(input);
    await userEvent.type(input, "20000000");
    await userEvent.click(within(card).getByRole("button", { name: "Train to 20000000 steps" }));
    await waitFor(() => expect(input).toHaveAccessibleDescription("Input should be less than or equal to 10000000"));
    expect(input).toHaveAttribute("aria-invalid", "true");
    expect(screen.getAllByRole("alert")).toHaveLength(1); // said once, under the input
    await userEvent.type(input, "{Backspace}");
    expect(input).toHaveAccessibleDescription(/from the checkpoint at step 120 to step 2000000/);
    expect(input).toHaveAttribute("aria-invalid", "false");
    expect(screen.queryByRole("alert")).toBeNull();
  });

  it("explains a run without checkpoints, and offers no resume or download it cannot do", async () => {
    serve({ ...RUN, resume_step: null, lora_file: false }, { checkpoints: [], resume_step: null });
    render(<RunDetailScreen id="r1" />);
    const card = await screen.findByTestId("checkpoints");
    await waitFor(() => expect(card).toHaveTextContent("No checkpoints"));
    expect(within(card).queryByRole("button")).toBeNull();
    expect(screen.queryByRole("link", { name: "Download LoRA" })).toBeNull();
    expect(screen.queryByRole("button", { name: /to the hub/ })).toBeNull();
  });

  it("shows a completed run's warnings (its final sample round failed, its LoRA kept) as no error", async () => {
    const warning = "the final sample round (step 120) failed: RuntimeError: boom; the run's LoRA is complete and kept, without those samples";
    serve({ ...RUN, status: "completed", resume_step: null, warnings: [warning] }, { ...CHECKPOINTS, resume_step: null });
    render(<RunDetailScreen id="r1" />);
    expect(await screen.findByTestId("run-warning")).toHaveTextContent(warning);
    expect(document.querySelector(".banner.error")).toBeNull();
  });

  it("lists the checkpoints of a completed run without a resume", async () => {
    serve({ ...RUN, status: "completed", resume_step: null }, { ...CHECKPOINTS, resume_step: null });
    render(<RunDetailScreen id="r1" />);
    const card = await screen.findByTestId("checkpoints");
    await waitFor(() => expect(within(card).getAllByRole("listitem")).toHaveLength(2));
    expect(card).toHaveTextContent("finished all its steps");
    expect(within(card).queryByRole("button")).toBeNull();
  });

  it("trains a completed run longer from its newest checkpoint and opens Live", async () => {
    const done = { ...RUN, status: "completed" as const, steps_run: 1000, resume_step: null, train_longer: { from_step: 120, steps: 1000 } };
    window.location.hash = "#/runs/r1";
    const calls = serve(done, { ...CHECKPOINTS, resume_step: null });
    render(<RunDetailScreen id="r1" />);
    const card = await screen.findByTestId("checkpoints");
    await userEvent.click(await within(card).findByRole("button", { name: "Train longer: portrait" }));
    expect(within(card).queryByRole("button", { name: /^Resum(e from [0-9]+|ing): portrait/ })).toBeNull();
    const input = within(card).getByRole("spinbutton", { name: "New total steps" });
    await userEvent.clear(input);
    await userEvent.type(input, "1600");
    await userEvent.click(within(card).getByRole("button", { name: "Train to 1600 steps" }));
    await waitFor(() => expect(window.location.hash).toBe("#/live"));
    expect(calls.find((c) => c.url === "/api/runs/r1/resume")).toMatchObject({ method: "POST", body: { settings: { steps: 1600 } } });
  });
  it("shows the plan the run used, with its measured trials", async () => {
    const trial = { base_precision: "int8", gradient_checkpointing: "full", micro_batch_size: 1, seconds_per_sample: 1.5, note: null };
    const plan: NonNullable<RunDetail["plan"]> = {
      type: "plan_chosen",
      base_precision: "int8",
      gradient_checkpointing: "full",
      offload_blocks: 12,
      micro_batch_size: 1,
      compile: true,
      compile_regions: "repeated blocks",
      attention_backend: "flash",
      fused_projections: 0,
      memory_budget_gb: 10,
      decided_by: "measured",
      trials: [
        { ...trial, offload_blocks: 0, peak_memory_gb: 14.2, fits: false },
        { ...trial, offload_blocks: 12, peak_memory_gb: 9.1, fits: true },
      ],
      fallbacks: [],
    };
    serve({ ...RUN, plan }, CHECKPOINTS);
    render(<RunDetailScreen id="r1" />);
    expect(await screen.findByTestId("plan-line")).toHaveTextContent(
      "int8 · checkpointing full · 12 blocks offloaded · micro-batch 1 · compiled: repeated blocks · attention flash",
    );
    const rows = within(screen.getByTestId("plan-trials")).getAllByRole("row").slice(1);
    expect(rows.map((r) => within(r).getAllByRole("cell").at(-1)?.textContent)).toEqual(["does not fit", "chosen"]);
  });

  it("leaves the attention kernel out of the plan line of a run record that has none", async () => {
    const older = { type: "plan_chosen", base_precision: "bf16", gradient_checkpointing: "off", offload_blocks: 0, micro_batch_size: 1, compile: false, memory_budget_gb: null, decided_by: "settings", trials: [], fallbacks: [] };
    serve({ ...RUN, plan: older as unknown as RunDetail["plan"] }, CHECKPOINTS);
    render(<RunDetailScreen id="r1" />);
    const line = await screen.findByTestId("plan-line");
    expect(line).toHaveTextContent("bf16 · checkpointing off · 0 blocks offloaded · micro-batch 1 · not compiled");
    expect(line).not.toHaveTextContent("attention");
  });

  it("shows no plan for a run that reported none", async () => {
    serve(RUN, CHECKPOINTS);
    render(<RunDetailScreen id="r1" />);
    await screen.findByTestId("checkpoints");
    expect(screen.queryByTestId("plan")).toBeNull();
  });

  it("offers clone and the config files, and shows the worker log", async () => {
    const calls = serve(RUN, CHECKPOINTS);
    render(<RunDetailScreen id="r1" />);
    expect(await screen.findByRole("link", { name: "Clone" })).toHaveAttribute("href", "#/clone/r1");
    expect(screen.getByRole("link", { name: "Config .toml: download the config as TOML" })).toHaveAttribute("href", "/api/runs/r1/config?format=toml");
    expect(screen.getByRole("link", { name: "Config .json: download the config as JSON" })).toHaveAttribute("href", "/api/runs/r1/config?format=json");
    const log = await screen.findByLabelText("run log");
    expect(log).toHaveTextContent("lorastudio.worker: model_load_started");
    expect(screen.getByTestId("run-log")).toHaveTextContent("Showing the last 2 lines.");
    await userEvent.click(within(screen.getByTestId("run-log")).getByRole("button", { name: "Refresh" }));
    await waitFor(() => expect(calls.filter((c) => c.url.startsWith("/api/runs/r1/log")).length).toBe(2));
    expect(screen.queryByText("CLI")).toBeNull();
  });

  it("marks a CLI run and says where its lines went", async () => {
    const note = "a run started with `lorastudio train` prints its lines to its terminal";
    serve({ ...RUN, source: "cli" }, CHECKPOINTS, undefined, { lines: [], truncated: false, size_bytes: 0, note });
    render(<RunDetailScreen id="r1" />);
    expect(await screen.findByText("CLI")).toHaveAttribute("title", "started with lorastudio train");
    expect(await within(screen.getByTestId("run-log")).findByText(note)).toBeInTheDocument();
    expect(screen.queryByLabelText("run log")).toBeNull();
  });
});
