/**
 * Base-model choices for the pickers, whatever API listed them, and which one to preselect.
 * Pure functions, no React.
 */
import type { CatalogueModel, LocalModel } from "../api/types";

/**
 * One entry of the picker, whatever API listed it: `path` is what goes into base_model;
 * `demo` marks the tiny random-weight models (preselected only when nothing else exists);
 * `problem` (not trainable, incomplete download...) disables it with the reason shown.
 */
export interface ModelChoice {
  name: string;
  path: string;
  family: string | null;
  demo: boolean;
  problem: string | null;
}

/** Picker entries from GET /api/info's `models` (demo models recognised by their name). */
export function choicesFromInfo(models: readonly LocalModel[]): ModelChoice[] {
  return models.map((m) => ({
    name: m.name,
    path: m.path,
    family: m.family,
    demo: /(^|[-_.])tiny([-_.]|$)/i.test(m.name),
    problem: null,
  }));
}

/**
 * Picker entries from GET /api/models. An untrainable model carries its reason and an
 * incomplete one what it lacks (both are shown, disabled); the tiny demo models are marked;
 * captioning models (kind "captioner") are not base models and are left out.
 */
export function choicesFromCatalogue(models: readonly CatalogueModel[]): ModelChoice[] {
  return models.filter((m) => m.kind !== "captioner").map((m) => ({
    name: m.name,
    path: m.path,
    family: m.family,
    demo: m.source === "tiny",
    problem: !m.trainable
      ? (m.reason ?? "not trainable")
      : !m.complete
        ? `incomplete: ${m.missing.slice(0, 3).join(", ") || "files missing"}`
        : null,
  }));
}

/** Models a family can use: those it trains, then those of unknown family. */
export function modelsFor(models: readonly ModelChoice[], family: string): ModelChoice[] {
  return [...models.filter((m) => m.family === family), ...models.filter((m) => m.family == null)];
}

/**
 * The base model to preselect for `family`: its first usable real model, else its tiny demo
 * model, else "" (the user types a hub id).
 */
export function defaultBaseModel(models: readonly ModelChoice[], family: string): string {
  const own = models.filter((m) => m.family === family && m.problem == null);
  return (own.find((m) => !m.demo) ?? own[0])?.path ?? "";
}

/**
 * The family to start with: that of the first usable real model, else of the first usable demo
 * model, else FLUX.1 when offered, else the first family ("" without families).
 */
export function defaultFamily(models: readonly ModelChoice[], families: readonly { name: string }[]): string {
  const offered = new Set(families.map((f) => f.name));
  const usable = models.filter((m) => m.problem == null && m.family != null && offered.has(m.family));
  const pick = usable.find((m) => !m.demo) ?? usable[0];
  return pick?.family ?? (offered.has("flux") ? "flux" : (families[0]?.name ?? ""));
}
