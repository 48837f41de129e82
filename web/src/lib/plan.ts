/**
 * The memory plan in words: the plan a run uses (its plan_chosen event) as one compact line, how
 * it was decided, and the preflight's plan settings with where each comes from. Pure functions,
 * no React.
 */
import type { Plan, PlanChosenEvent, PlanField, PlanTrial } from "../api/types";
import { formatGb } from "./format";

const plural = (n: number, one: string, many: string) => `${n} ${n === 1 ? one : many}`;

type PlanLineFields = Pick<Plan, "base_precision" | "gradient_checkpointing" | "offload_blocks" | "micro_batch_size" | "compile"> & {
  /** What is compiled ("repeated blocks", "wide + CUDA graphs"); missing or "": just "compiled". */
  compile_regions?: string | null;
  /** The SDPA kernel the run uses; missing or "" (not reported) leaves it out of the line. */
  attention_backend?: string | null;
  /** Groups of same-input projections run as one matmul; missing or 0 leaves it out. */
  fused_projections?: number | null;
};

/** "bf16 · checkpointing off · 0 blocks offloaded · micro-batch 2 · compiled · attention cudnn" */
export function planLine(plan: PlanLineFields): string {
  return [
    plan.base_precision,
    `checkpointing ${plan.gradient_checkpointing}`,
    `${plural(plan.offload_blocks, "block", "blocks")} offloaded`,
    `micro-batch ${plan.micro_batch_size}`,
    plan.compile ? (plan.compile_regions ? `compiled: ${plan.compile_regions}` : "compiled") : "not compiled",
    ...(plan.attention_backend ? [`attention ${plan.attention_backend}`] : []),
    ...(plan.fused_projections ? [plural(plan.fused_projections, "fused projection group", "fused projection groups")] : []),
  ].join(" · ");
}

/** How the plan was decided: "fixed by the settings", "measured for a 20 GB budget", ... */
export function planDecidedText(plan: Pick<Plan, "decided_by" | "memory_budget_gb" | "trials">): string {
  if (plan.decided_by === "checkpoint") return "the plan of the checkpoint this run resumes";
  if (plan.decided_by === "measured") {
    const budget = plan.memory_budget_gb != null ? ` for a ${formatGb(plan.memory_budget_gb)} budget` : "";
    return `measured${budget} (${plural(plan.trials.length, "trial", "trials")})`;
  }
  return "fixed by the settings";
}

/** Whether a measured trial is the plan the run went with. */
export function isChosenTrial(plan: Plan, trial: PlanTrial): boolean {
  return (
    trial.base_precision === plan.base_precision &&
    trial.gradient_checkpointing === plan.gradient_checkpointing &&
    trial.offload_blocks === plan.offload_blocks &&
    trial.micro_batch_size === plan.micro_batch_size
  );
}

/** A plan_chosen event from the stream as the job snapshot holds it (defaults filled). */
export function planFromEvent(ev: PlanChosenEvent): Plan {
  return {
    type: "plan_chosen",
    base_precision: ev.base_precision,
    gradient_checkpointing: ev.gradient_checkpointing,
    offload_blocks: ev.offload_blocks,
    micro_batch_size: ev.micro_batch_size,
    compile: ev.compile,
    compile_regions: ev.compile_regions ?? "",
    attention_backend: ev.attention_backend ?? "", // "": not reported, left out of the plan line
    fused_projections: ev.fused_projections ?? 0,
    memory_budget_gb: ev.memory_budget_gb ?? null,
    decided_by: ev.decided_by ?? "settings",
    trials: (ev.trials ?? []).map((t) => ({ ...t, note: t.note ?? null })),
    fallbacks: ev.fallbacks ?? [],
  };
}

/** Labels of the plan settings in the preflight report. */
export const PLAN_FIELD_LABELS: Record<PlanField["name"], string> = {
  base_precision: "Precision",
  gradient_checkpointing: "Checkpointing",
  offload_blocks: "Blocks offloaded",
  micro_batch_size: "Micro-batch",
};

/** A preflight plan setting's value and source: "bf16 (default)", "measured at start", "2". */
export function planFieldText(field: PlanField): string {
  if (field.source === "budget") return "measured at start";
  const value = String(field.value);
  return field.source === "default" ? `${value} (default)` : value;
}
