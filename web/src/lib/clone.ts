/** The Train form of a cloned run: its resolved config, fetched, as form values of its family. */
import { api } from "../api/endpoints";
import { loadMessage, useLoad } from "./latest";
import type { Family, RunDetail } from "../api/types";
import { type FormValues, valuesFromConfig } from "./trainForm";

export interface CloneState {
  /** The form values (null until loaded, or without a run to clone). */
  values: FormValues | null;
  /** The run cloned from (null until loaded). */
  from: Pick<RunDetail, "id" | "output_name"> | null;
  error: string | null;
}

/** Load run `id` (undefined: nothing to clone) and turn its config into form values once the families are known. */
export function useCloneValues(id: string | undefined, families: Family[] | undefined): CloneState {
  // keyed by the run: a slow answer for the run asked before never fills the form of this one
  const loaded = useLoad(id ? (signal) => api.run(id, signal) : null, id ?? null);
  const run = loaded.data;
  const error = loaded.error ? `Cannot clone run ${id}: ${loadMessage(loaded.error, "it was deleted (in another tab or with the CLI)")}` : null;
  if (!run || !families) return { values: null, from: null, error };
  const family = families.find((f) => f.name === run.family);
  if (!family) return { values: null, from: null, error: `Cannot clone run ${run.output_name}: this server has no family ${run.family}` };
  return { values: valuesFromConfig(family, run.config), from: { id: run.id, output_name: run.output_name }, error };
}
