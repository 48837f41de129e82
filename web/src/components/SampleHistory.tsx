import { memo, useEffect, useMemo, useState } from "react";
import { api } from "../api/endpoints";
import type { SampleImage } from "../api/types";
import { useSamplePages } from "../lib/samplePages";
import { SampleAgain, SampleAgainOnClick } from "./SampleAgain";
import { sampleIndex } from "./SamplePreviews";
import { OlderRounds } from "./OlderRounds";
import { ScrollRegion } from "./ScrollRegion";

/** The rounds the table asks for in a page (GET /api/runs/{id}/samples' `limit`, newest first); "Show older rounds" adds the next. */
export const HISTORY_ROUNDS = 20;

/** Sample rounds by step: each round's image URLs in prompt order. */
export type Rounds = Map<number, string[]>;

/** Rounds from a run's stored sample files (GET /api/runs/{id}/samples). */
export function roundsFromFiles(samples: SampleImage[]): Rounds {
  const rounds: Rounds = new Map();
  for (const s of samples) {
    const urls = rounds.get(s.step) ?? [];
    urls[s.index] = api.imageUrl(s.url);
    rounds.set(s.step, urls);
  }
  return rounds;
}

/** `rounds` with one more round (a sample_ready event: run-relative image paths), replacing a round of the same step. */
export function withRound(rounds: Rounds, runId: string, step: number, images: string[]): Rounds {
  const next = new Map(rounds);
  const urls: string[] = []; // by the prompt index of each name: a round may lack a prompt's file (RELIABILITY 1651)
  images.forEach((p, position) => (urls[sampleIndex(p, position)] = api.sampleUrl(runId, p)));
  next.set(step, urls);
  return next;
}

interface Props {
  runId: string;
  latest: { step: number; images: string[] } | null;
  prompts: string[];
}

/** Whether two renders' props show the same: the Live screen renders at every step, with its prompts a new array each time. */
function sameProps(a: Props, b: Props): boolean {
  return a.runId === b.runId && a.latest === b.latest && a.prompts.length === b.prompts.length && a.prompts.every((p, i) => p === b.prompts[i]);
}

/**
 * Every sample round of a run side by side: one column per step (oldest left), one row per prompt. Loads the
 * newest HISTORY_ROUNDS rounds already on disk once ("Show older rounds" adds the page before them), then adds each new round (`latest`, from the event stream) without asking the
 * server again. Shown from the second round on. Each preview has its "Generate again" (SampleAgain; a
 * round added since asks for its listing entry on the click). Rendered again only when a round comes or
 * the run changes, not at each step of the Live screen, and each cell finds its listing entry by key: a
 * long run's 1,600 previews made every step's render search the listing once a cell (RELIABILITY 1293).
 */
export const SampleHistory = memo(SampleHistoryTable, sameProps);

function SampleHistoryTable({ runId, latest, prompts }: Props) {
  // the stored rounds, keyed by the run (a slow answer for another run never shows), and those the
  // event stream added since, kept with the run they belong to
  // the listing is paged (RELIABILITY 1341: a long run's 400 rounds were one 553 KB answer): the newest
  // HISTORY_ROUNDS rounds first, older ones on "Show older rounds"
  const pages = useSamplePages(runId, HISTORY_ROUNDS);
  const stored = pages.samples;
  const [added, setAdded] = useState<{ runId: string; rounds: Rounds }>({ runId, rounds: new Map() });
  useEffect(() => {
    if (latest) setAdded((now) => ({ runId, rounds: withRound(now.runId === runId ? now.rounds : new Map(), runId, latest.step, latest.images) }));
  }, [runId, latest]);
  const files = useMemo(() => roundsFromFiles(stored ?? []), [stored]);
  // the listing's entry of each (step, prompt index)
  const entries = useMemo(() => new Map((stored ?? []).map((x) => [`${x.step}:${x.index}`, x])), [stored]);
  const since = added.runId === runId ? added.rounds : new Map<number, string[]>();
  const rounds: Rounds = new Map([...files, ...since]);
  const steps = [...rounds.keys()].sort((a, b) => a - b);
  if (steps.length < 2) return null;
  const rows = Math.max(...steps.map((s) => rounds.get(s)?.length ?? 0));
  return (
    <div className="card" data-testid="sample-history">
      <h2>Sample history</h2>
      <ScrollRegion label="sample history">
        <table className="sample-history">
          <thead>
            <tr>
              <th scope="col">
                <span className="visually-hidden">Prompt</span>
              </th>
              {steps.map((s) => (
                <th key={s} scope="col">
                  step {s}
                </th>
              ))}
            </tr>
          </thead>
          <tbody>
            {Array.from({ length: rows }, (_, i) => (
              <tr key={i}>
                <th scope="row" className="small muted">
                  {prompts[i] || `prompt ${i + 1}`}
                </th>
                {steps.map((s) => {
                  const url = rounds.get(s)?.[i];
                  const label = `${prompts[i] || `prompt ${i + 1}`}, step ${s}`;
                  // the listing's entry, while the cell shows the stored file (not a round added since)
                  const entry = entries.get(`${s}:${i}`);
                  const source = entry && api.imageUrl(entry.url) === url ? entry : undefined;
                  return (
                    <td key={s}>
                      {url && <img src={url} alt={label} loading="lazy" />}
                      {url &&
                        (source ? (
                          <SampleAgain runId={runId} source={source} label={label} />
                        ) : (
                          <SampleAgainOnClick runId={runId} step={s} index={i} label={label} />
                        ))}
                    </td>
                  );
                })}
              </tr>
            ))}
          </tbody>
        </table>
      </ScrollRegion>
      <OlderRounds key={runId} pages={pages} shown={steps.length} since={[...since.keys()].filter((s) => !files.has(s)).length} />
    </div>
  );
}
