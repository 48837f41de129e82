import { describe, expect, it } from "vitest";
import type { Plan, PlanField } from "../api/types";
import { isChosenTrial, planDecidedText, planFieldText, planFromEvent, planLine } from "./plan";

const SETTINGS: Plan = {
  type: "plan_chosen",
  base_precision: "bf16",
  gradient_checkpointing: "off",
  offload_blocks: 0,
  micro_batch_size: 2,
  compile: true,
  compile_regions: "",
  attention_backend: "cudnn",
  fused_projections: 0,
  memory_budget_gb: null,
  decided_by: "settings",
  trials: [],
  fallbacks: [],
};

const trial = (over: Partial<Plan["trials"][number]>): Plan["trials"][number] => ({
  base_precision: "bf16",
  gradient_checkpointing: "off",
  offload_blocks: 0,
  micro_batch_size: 2,
  seconds_per_sample: 0.5,
  peak_memory_gb: 30,
  fits: true,
  note: null,
  ...over,
});

describe("the plan in words", () => {
  it("says the whole plan in one line", () => {
    expect(planLine(SETTINGS)).toBe("bf16 · checkpointing off · 0 blocks offloaded · micro-batch 2 · compiled · attention cudnn");
    expect(
      planLine({ ...SETTINGS, base_precision: "nf4", gradient_checkpointing: "selective", offload_blocks: 1, micro_batch_size: 1, compile: false, attention_backend: "default" }),
    ).toBe("nf4 · checkpointing selective · 1 block offloaded · micro-batch 1 · not compiled · attention default");
  });

  it("counts the fused projection groups when there are any", () => {
    expect(planLine({ ...SETTINGS, fused_projections: 1 })).toBe(
      "bf16 · checkpointing off · 0 blocks offloaded · micro-batch 2 · compiled · attention cudnn · 1 fused projection group",
    );
    expect(planLine({ ...SETTINGS, fused_projections: 57 })).toMatch(/ · 57 fused projection groups$/);
  });

  it("names what is compiled when the run reports it", () => {
    expect(planLine({ ...SETTINGS, compile_regions: "wide + CUDA graphs" })).toBe(
      "bf16 · checkpointing off · 0 blocks offloaded · micro-batch 2 · compiled: wide + CUDA graphs · attention cudnn",
    );
    expect(planLine({ ...SETTINGS, compile: false, compile_regions: "" })).toMatch(/· not compiled ·/);
  });

  it("leaves the attention kernel out when the plan does not report one", () => {
    const { attention_backend: _, ...older } = SETTINGS;
    expect(planLine(older)).toBe("bf16 · checkpointing off · 0 blocks offloaded · micro-batch 2 · compiled");
    expect(planLine({ ...SETTINGS, attention_backend: "" })).toBe("bf16 · checkpointing off · 0 blocks offloaded · micro-batch 2 · compiled");
  });

  it("says how the plan was decided", () => {
    expect(planDecidedText(SETTINGS)).toBe("fixed by the settings");
    expect(planDecidedText({ ...SETTINGS, decided_by: "checkpoint" })).toMatch(/checkpoint this run resumes/);
    const measured = { ...SETTINGS, decided_by: "measured" as const, memory_budget_gb: 20, trials: [trial({}), trial({ fits: false })] };
    expect(planDecidedText(measured)).toBe("measured for a 20.0 GB budget (2 trials)");
  });

  it("finds the trial the run went with", () => {
    expect(isChosenTrial(SETTINGS, trial({}))).toBe(true);
    expect(isChosenTrial(SETTINGS, trial({ micro_batch_size: 1 }))).toBe(false);
    expect(isChosenTrial(SETTINGS, trial({ gradient_checkpointing: "full" }))).toBe(false);
  });

  it("turns a streamed plan_chosen event into the job's plan, defaults filled", () => {
    const plan = planFromEvent({
      type: "plan_chosen",
      base_precision: "fp32",
      gradient_checkpointing: "off",
      offload_blocks: 0,
      micro_batch_size: 1,
      compile: false,
      trials: [{ base_precision: "fp32", gradient_checkpointing: "off", offload_blocks: 0, micro_batch_size: 1, seconds_per_sample: null, peak_memory_gb: null, fits: false }],
    });
    expect(plan).toMatchObject({ decided_by: "settings", memory_budget_gb: null, fallbacks: [], compile_regions: "" });
    expect(plan.trials[0].note).toBeNull();
    expect(planLine(plan)).not.toMatch(/attention/); // an event without the kernel: not shown
    expect(planFromEvent({ ...SETTINGS, attention_backend: "flash" }).attention_backend).toBe("flash");
  });

  it("shows a preflight plan setting with its source", () => {
    const field = (over: Partial<PlanField>): PlanField => ({ name: "base_precision", requested: "auto", value: "bf16", source: "default", ...over });
    expect(planFieldText(field({}))).toBe("bf16 (default)");
    expect(planFieldText(field({ source: "settings", requested: "nf4", value: "nf4" }))).toBe("nf4");
    expect(planFieldText(field({ source: "budget", value: null }))).toBe("measured at start");
    expect(planFieldText(field({ name: "offload_blocks", source: "default", requested: null, value: 0 }))).toBe("0 (default)");
  });
});
