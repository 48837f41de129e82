import { api } from "../api/endpoints";
import type { SampleImage } from "../api/types";
import { ReferenceStrip } from "./ReferenceImages";
import { SampleAgain, SampleAgainOnClick } from "./SampleAgain";

/** One sample image of a round: where it is served and the prompt it shows. */
export interface SampleTile {
  index: number;
  url: string;
  prompt: string | null;
  /** The reference images it was rendered with (an edit family's), slot order. */
  references?: string[];
  /** Its entry of the run's listing (what renders it again): undefined while not known. */
  source?: SampleImage;
}

/** The sample prompts' texts of a (resolved) config dict, in order (an entry may be a prompt or an object with one); [] when it has none. */
export function samplePrompts(config: Record<string, unknown> | null | undefined): string[] {
  const prompts = config?.["sample_prompts"];
  if (!Array.isArray(prompts)) return [];
  return prompts.map((p: unknown) => {
    if (typeof p === "string") return p;
    const text = p && typeof p === "object" ? (p as { prompt?: unknown }).prompt : undefined;
    return typeof text === "string" ? text : ""; // a malformed entry keeps its index (tiles are in prompt order)
  });
}

/**
 * The prompt index of a sample file's run-relative path ("samples/step-000004-2.png": 2), else `position`. A round
 * has no file for a prompt whose image came out NaN or infinite (RELIABILITY 1651): a position is not the index.
 */
export function sampleIndex(path: string, position: number): number {
  const match = /-(\d+)\.png$/.exec(path);
  return match ? Number(match[1]) : position;
}

/** The tiles of one round from run-relative image paths (in prompt order; each with the prompt index of its name). */
export function roundTiles(runId: string, images: string[], prompts: string[]): SampleTile[] {
  return images.map((path, position) => {
    const index = sampleIndex(path, position);
    return { index, url: api.sampleUrl(runId, path), prompt: prompts[index] ?? null };
  });
}

/** A run's sample files grouped by step, newest step first, each round in prompt order. */
export function groupByStep(samples: SampleImage[]): { step: number; tiles: SampleTile[] }[] {
  const rounds = new Map<number, SampleTile[]>();
  for (const s of samples) {
    const tiles = rounds.get(s.step) ?? [];
    tiles.push({ index: s.index, url: api.imageUrl(s.url), prompt: s.prompt ?? null, references: s.references ?? [], source: s });
    rounds.set(s.step, tiles);
  }
  return [...rounds.entries()]
    .sort(([a], [b]) => b - a)
    .map(([step, tiles]) => ({ step, tiles: tiles.sort((a, b) => a.index - b.index) }));
}

/** One round of sample previews of run `runId`: a heading with its step and one figure per prompt,
 * each with its "Generate again" (`live`: tiles without their listing entry, asked for on the click). */
export function SampleRound({ runId, step, tiles, live = false }: { runId: string; step: number; tiles: SampleTile[]; live?: boolean }) {
  return (
    <div className="sample-round" data-testid={`samples-step-${step}`}>
      <h3>Step {step}</h3>
      <div className="thumb-grid samples">
        {tiles.map((t) => (
          <figure className="thumb" key={t.index}>
            <div className="thumb-img">
              <img src={t.url} alt={t.prompt ?? `sample ${t.index + 1}`} loading="lazy" />
            </div>
            <figcaption className="small muted">
              {t.prompt ?? `prompt ${t.index + 1}`} <ReferenceStrip urls={t.references ?? []} />{" "}
              {live && !t.source ? (
                <SampleAgainOnClick runId={runId} step={step} index={t.index} label={`${t.prompt ?? `prompt ${t.index + 1}`}, step ${step}`} />
              ) : (
                <SampleAgain runId={runId} source={t.source} label={`${t.prompt ?? `prompt ${t.index + 1}`}, step ${step}`} />
              )}
            </figcaption>
          </figure>
        ))}
      </div>
    </div>
  );
}
