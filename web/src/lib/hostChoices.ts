/**
 * The Train form's choices that depend on the host (lib/trainForm.ts re-exports them): precisions,
 * GPUs, the memory budget's hint, which optimizers, compile modes and attention kernels can run
 * here (as the server's HostOut lists them).
 */
import type { Family, Host } from "../api/types";
import { PRECISIONS, type AttentionBackend, type CompileMode, type Optimizer } from "./trainChoices";

/** The precision choices of `host`: its `precisions`, in the config's order, with labels. */
export function precisionChoices(precisions: readonly string[]): Record<string, string> {
  const known = Object.entries(PRECISIONS).filter(([p]) => precisions.includes(p));
  const unknown = precisions.filter((p) => !(p in PRECISIONS)).map((p) => [p, p]);
  return Object.fromEntries([...known, ...unknown]);
}

/**
 * `host` as a run over its first `numGpus` GPUs sees it: the precisions, compile modes, attention
 * kernels and optimizers of the weakest of them (`run_choices`, as the job service judges a
 * num_gpus run); `host` itself for one GPU or where the server gave none.
 */
export function hostForGpus(host: Host, numGpus: number): Host {
  const choices = numGpus > 1 ? host.run_choices?.[Math.min(numGpus, host.run_choices.length) - 1] : undefined;
  return choices ? { ...host, ...choices } : host;
}

/** How the GPUs input behaves on `host`: at most `gpu_count`; disabled (with why) below 2 GPUs. */
export function gpuInput(host: Host): { max: number; disabled: boolean; hint: string } {
  const count = host.gpu_count ?? 0;
  if (host.device !== "cuda" || count < 1) return { max: 1, disabled: true, hint: "data-parallel training needs CUDA GPUs; this host has none" };
  if (count === 1) return { max: 1, disabled: true, hint: "this host has 1 GPU" };
  return { max: count, disabled: false, hint: `data-parallel, up to ${count} on this host` };
}

/**
 * The memory budget's hint: the GPU's memory, or why a budget cannot apply here. Blank on a GPU is
 * no budget while the default plan is forecast to fit it, else the GPU's memory less 1 GiB
 * (jobs/card_fit.py: the preflight says which).
 */
export function budgetHint(host: Host): string {
  if (host.device !== "cuda") return `needs a CUDA GPU (this host: ${host.name}); blank = no budget`;
  const blank = "blank = none, or the GPU's memory less 1 GiB where the default plan does not fit it";
  return host.memory_gb != null ? `this GPU has ${host.memory_gb} GB; ${blank}` : blank;
}

/**
 * Whether `mode` can run on `host` for `family`: the host lists it (`compile_modes`: on / wide
 * need CUDA) and, for wide, the family has wider compile regions (`wide_compile`: SDXL only).
 */
export function compileAvailable(mode: CompileMode, host: Host, family?: Family): boolean {
  if (mode === "wide" && !family?.wide_compile) return false;
  return host.compile_modes.includes(mode);
}

/** Whether `optimizer` can run on `host` (it lists it in `optimizers`: the 8-bit ones need CUDA and bitsandbytes). */
export function optimizerAvailable(optimizer: Optimizer, host: Host): boolean {
  return host.optimizers.includes(optimizer);
}

/**
 * Whether attention `backend` has a kernel on `host` (it lists it in `attention_backends`: cudnn /
 * efficient / fa4 need CUDA, flash CUDA or the CPU; fa4 also a Hopper / Blackwell GPU, which the
 * preflight checks) and `family` does not refuse it (`attention_backends_refused`: Chroma's cudnn).
 */
export function attentionAvailable(backend: AttentionBackend, host: Host, family?: Family): boolean {
  return host.attention_backends.includes(backend) && !(family?.attention_backends_refused ?? []).includes(backend);
}

/** The attention setting's hint: what auto does here and why some kernels are greyed out. */
export function attentionHint(host: Host, family?: Family): string {
  const refused = family?.attention_backends_refused ?? [];
  const byFamily = refused.length ? `; ${family?.title} refuses ${refused.join(", ")}` : "";
  if (host.device === "cuda") return `auto = FlashAttention-4 or cuDNN for transformers when a probe at the run's shapes passes, else flash${byFamily}`;
  const flash = host.device === "cpu" ? "" : ", flash a CUDA GPU or the CPU";
  return `auto = torch's default here; cuDNN, FlashAttention-4 and memory-efficient need a CUDA GPU${flash} (this host: ${host.name})${byFamily}`;
}
