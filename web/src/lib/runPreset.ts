/** "Generate with it": the family, base model and LoRA of a run, for the Generate screen. */
import { useEffect, useState } from "react";
import { api } from "../api/endpoints";

export interface RunPreset {
  family: string;
  base_model: string;
  /** The run's LoRA (its output name), when its file exists. */
  lora: string | null;
}

/** Load run `id` (undefined: none). `preset` is null until loaded; `error` says why it could not be. */
export function useRunPreset(id: string | undefined): { preset: RunPreset | null; error: string | null; pending: boolean } {
  const [preset, setPreset] = useState<RunPreset | null>(null);
  const [error, setError] = useState<string | null>(null);
  useEffect(() => {
    if (!id) return;
    api.run(id).then(
      (run) =>
        setPreset({
          family: run.family,
          base_model: String(run.config.base_model ?? ""),
          lora: run.lora_file ? run.output_name : null,
        }),
      (err: Error) => setError(`Cannot open run ${id}: ${err.message}`),
    );
  }, [id]);
  return { preset, error, pending: id != null && preset == null && error == null };
}
