/** "Generate with it": the family, base model and LoRA of a run, for the Generate screen. */
import { api } from "../api/endpoints";
import { loadMessage, useLoad } from "./latest";

export interface RunPreset {
  family: string;
  base_model: string;
  /** The run's LoRA (its output name), when its file exists. */
  lora: string | null;
}

/** Load run `id` (undefined: none). `preset` is null until loaded; `error` says why it could not be. */
export function useRunPreset(id: string | undefined): { preset: RunPreset | null; error: string | null; pending: boolean } {
  // keyed by the run: a slow answer for the run asked before never presets this one
  const loaded = useLoad(
    id
      ? (signal) =>
          api.run(id, signal).then((run) => ({
            family: run.family,
            base_model: String(run.config.base_model ?? ""),
            lora: run.lora_file ? run.output_name : null,
          }))
      : null,
    id ?? null,
  );
  const error = loaded.error ? `Cannot open run ${id}: ${loadMessage(loaded.error, "it was deleted (in another tab or with the CLI)")}` : null;
  return { preset: loaded.data, error, pending: id != null && loaded.loading };
}
