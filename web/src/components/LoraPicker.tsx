import { useId, useRef } from "react";
import { api } from "../api/endpoints";
import { useDescribedControls } from "./Field";
import { LORA_SCALE } from "../api/limits.gen";
import type { Lora, LoraRef } from "../api/types";
import { formatBytes } from "../lib/format";
import { useLoad } from "../lib/latest";
import type { LoraListView } from "../lib/loraList";

/** A chosen LoRA file and its scale: `step` null/absent = the run's LoRA (with EMA the EMA
 * weights), a step = the raw weights of that step (an EMA run's <name>.raw.safetensors), or with
 * `weights` "ema" the EMA weights of that step (the file an EMA run's checkpoint keeps); `sha256`:
 * that exact file (a reused gallery image's; the server refuses a file since changed), absent: the file as it is. */
export type LoraPick = Required<Pick<LoraRef, "name" | "scale">> & { step?: number | null; sha256?: string | null; weights?: "raw" | "ema" | null };

type LoraFile = NonNullable<Lora["files"]>[number];

interface Props {
  loras: readonly Lora[];
  picks: readonly LoraPick[];
  onChange: (picks: LoraPick[]) => void;
  family: string;
  /** The server's problem with the picked LoRAs (`loras`, e.g. "#2 scale: ..."), shown below the list. */
  error?: string;
  /** Why the list could not be loaded (shown instead of "no LoRA yet"). */
  unavailable?: string | null;
  /** Whether `loras` is the server's answer (false while it loads: no pick is called missing yet). */
  loaded?: boolean;
  /** The list's pages and search (lib/loraList.useLoraList); absent: `loras` is every LoRA. */
  pages?: Pick<LoraListView, "total" | "shown" | "searchable" | "query" | "setQuery" | "more" | "morePending" | "moreError">;
}

/** One row per pickable file of each LoRA (the API's `files`; a list without them: the run's LoRA). */
function filesOf(l: Lora): LoraFile[] {
  if (l.files?.length) return l.files;
  return [{ weights: l.weights, step: null, trained_steps: null, bytes: l.bytes, url: `/api/loras/${l.name}/file`, validation_loss: null, best: false, last: false }];
}

const isEma = (p: Pick<LoraPick, "weights">) => p.weights === "ema";
const samePick = (p: LoraPick, name: string, step: number | null, ema = false) =>
  p.name === name && (p.step ?? null) === step && (step == null || isEma(p) === ema);

/** How a file is named in its controls: "smooth", "smooth (raw, step 400)", or "smooth (EMA, step 400)"
 * for the EMA weights an EMA run's checkpoint kept. */
export const fileLabel = (name: string, f: Pick<LoraFile, "step"> & { weights?: string | null }) =>
  f.step == null ? name : `${name} (${f.weights === "ema" ? "EMA" : "raw"}, step ${f.step})`;

/**
 * The trained LoRAs of a family: a checkbox and a scale slider per file, and a download link.
 * A run with EMA offers both its files, labelled EMA / raw; each shows its validation loss and
 * the best / last validation marks (only raw weights are measured).
 */
export function LoraPicker({ loras, picks, onChange, family, error, unavailable, loaded = true, pages }: Props) {
  const toggle = (name: string, step: number | null, ema = false) =>
    onChange(
      picks.some((p) => samePick(p, name, step, ema))
        ? picks.filter((p) => !samePick(p, name, step, ema))
        : [...picks, step == null ? { name, scale: 1 } : { name, scale: 1, step, ...(ema ? { weights: "ema" as const } : {}) }],
    );
  const setScale = (name: string, step: number | null, scale: number, ema = false) =>
    onChange(picks.map((p) => (samePick(p, name, step, ema) ? { ...p, scale } : p)));

  // picks of files the list does not have: a snapshot of a listed LoRA (a step grid's image
  // reused, a preview's "Generate again": the list offers final files only), asked of the
  // LoRA's steps; else one deleted or renamed since (a kept draft's, a reused image's): shown,
  // ticked, so that they can be seen and unticked, not sent unseen
  const unlisted =
    loaded && !unavailable
      ? picks.filter(
          // an EMA step pick is never one of the list's files (those are final files and raw steps)
          (p) => (isEma(p) && p.step != null) || !loras.some((l) => l.name === p.name && filesOf(l).some((f) => (f.step ?? null) === (p.step ?? null))),
        )
      : [];
  const stepNames = [...new Set(unlisted.filter((p) => p.step != null && loras.some((l) => l.name === p.name)).map((p) => p.name))].sort();
  const snapshotSteps = useLoad(
    stepNames.length
      ? (signal) =>
          Promise.all(
            stepNames.map((n) =>
              api.loraSteps(n, signal).then(
                // "raw-N" / "ema-N": the weights kept of each step (snapshots, an EMA run's checkpoints)
                (r) => [n, r.loras.map((x) => `${x.weights}-${x.step}`)] as const,
                () => [n, [] as string[]] as const,
              ),
            ),
          ).then((rows) => new Map<string, string[]>(rows))
      : null,
    stepNames,
  );
  const isSnapshot = (p: LoraPick) =>
    p.step != null && (snapshotSteps.data?.get(p.name) ?? []).includes(`${isEma(p) ? "ema" : "raw"}-${p.step}`);
  // a step pick of a listed LoRA is not called missing before its steps are known
  const settled = (p: LoraPick) => p.step == null || !stepNames.includes(p.name) || snapshotSteps.data != null;
  const snapshots = unlisted.filter(isSnapshot);
  const missing = unlisted.filter((p) => settled(p) && !isSnapshot(p));
  const id = useId();
  const box = useRef<HTMLDivElement | null>(null);
  useDescribedControls(box, error ? `${id}-error` : null, !!error); // the list's problem is read with each of its controls

  return (
    <div className={`field wide${error ? " has-error" : ""}`} ref={box} role="group" aria-label="LoRAs">
      <span className="field-label">LoRAs</span>
      {pages?.searchable && !unavailable && (
        <input
          type="search"
          className="lora-search"
          value={pages.query}
          onChange={(e) => pages.setQuery(e.target.value)}
          placeholder="Search by name"
          aria-label={`search the ${family} LoRAs by name`}
        />
      )}
      {unavailable ? (
        <span className="field-error" role="alert">
          {unavailable}
        </span>
      ) : loras.length === 0 && pages?.query ? (
        <span className="muted small lora-empty">No {family} LoRA's name holds “{pages.query}”.</span>
      ) : loras.length === 0 ? (
        <span className="muted small lora-empty">
          No trained {family} LoRA yet. <a href="#/train">Train one</a> and it appears here.
        </span>
      ) : (
        <ul className="lora-list">
          {loras.flatMap((l) => {
            const files = filesOf(l);
            const ema = files.some((f) => f.weights === "ema");
            return files.map((f) => {
              const step = f.step ?? null;
              const label = fileLabel(l.name, f);
              const pick = picks.find((p) => samePick(p, l.name, step));
              return (
                <li key={`${l.name}@${step ?? "final"}`} className={pick ? "picked" : undefined}>
                  <label className="check lora-name" title={l.path}>
                    <input type="checkbox" checked={!!pick} onChange={() => toggle(l.name, step)} aria-label={`use LoRA ${label}`} />
                    <span className="filename">{l.name}</span>
                    {ema && f.weights === "ema" && (
                      <span className="chip small" title="the EMA of the adapter weights (not measured by validation)">
                        EMA
                      </span>
                    )}
                    {ema && f.weights === "raw" && (
                      <span className="chip small" title="the raw trained weights (<name>.raw.safetensors): the ones validation measured">
                        raw
                      </span>
                    )}
                    {f.trained_steps != null && <span className="muted small">step {f.trained_steps}</span>}
                    {f.validation_loss != null && (
                      <span className="chip small" title="validation loss of this file's step">
                        val {f.validation_loss.toPrecision(4)}
                      </span>
                    )}
                    {f.best && (
                      <span className="chip small" title="measured in the run's best validation round">
                        best
                      </span>
                    )}
                    {f.last && (
                      <span className="chip small" title="measured in the run's last validation round">
                        last
                      </span>
                    )}
                  </label>
                  <span className="lora-tools">
                    {pick ? (
                      <ScaleSlider
                        label={label}
                        scale={pick.scale}
                        onScale={(scale) => setScale(l.name, step, scale)}
                      />
                    ) : (
                      <span className="muted small">{formatBytes(f.bytes)}</span>
                    )}
                    <a
                      className="button ghost small"
                      href={api.loraFileUrl(l.name, step)}
                      download
                      aria-label={`download LoRA ${label}`}
                      title="Download the .safetensors"
                    >
                      ↓
                    </a>
                  </span>
                </li>
              );
            });
          })}
        </ul>
      )}
      {pages && !unavailable && pages.total != null && pages.shown < pages.total && (
        <p className="muted small" data-testid="loras-count">
          {pages.shown} of {pages.total} LoRAs{pages.query ? ` whose name holds “${pages.query}”` : ""}
          {pages.more && (
            <>
              {" "}
              <button
                type="button"
                className="ghost small"
                disabled={pages.morePending}
                aria-describedby={pages.moreError ? `${id}-more-error` : undefined} // why the last page failed (RELIABILITY 2060)
                onClick={pages.more}
              >
                Show more
              </button>
            </>
          )}
        </p>
      )}
      {pages?.moreError && (
        <span className="field-error" role="alert" id={`${id}-more-error`}>
          {pages.moreError}
        </span>
      )}
      {snapshots.length > 0 && (
        <ul className="lora-list" data-testid="snapshot-loras">
          {snapshots.map((p) => {
            const label = fileLabel(p.name, { step: p.step ?? null, weights: p.weights });
            return (
              <li key={`${p.name}@${p.step}${isEma(p) ? "-ema" : ""}`} className="picked">
                <label className="check lora-name">
                  <input type="checkbox" checked onChange={() => toggle(p.name, p.step ?? null, isEma(p))} aria-label={`use LoRA ${label}`} />
                  <span className="filename">{label}</span>
                  <span
                    className="chip small"
                    title={
                      isEma(p)
                        ? "the EMA weights the run's checkpoint of this step kept (checkpoints/step-N/<name>-step-N.ema)"
                        : "a LoRA snapshot the run kept of this step (loras/<name>-step-N)"
                    }
                  >
                    snapshot
                  </span>
                </label>
                <span className="lora-tools">
                  <ScaleSlider
                    label={label}
                    scale={p.scale}
                    onScale={(scale) => setScale(p.name, p.step ?? null, scale, isEma(p))}
                  />
                </span>
              </li>
            );
          })}
        </ul>
      )}
      {missing.length > 0 && (
        <ul className="lora-list" data-testid="missing-loras">
          {missing.map((p) => {
            const label = fileLabel(p.name, { step: p.step ?? null, weights: p.weights });
            return (
              <li key={`${p.name}@${p.step ?? "final"}${isEma(p) ? "-ema" : ""}`} className="picked">
                <label className="check lora-name">
                  <input type="checkbox" checked onChange={() => toggle(p.name, p.step ?? null, isEma(p))} aria-label={`use LoRA ${label}`} />
                  <span className="filename">{label}</span>
                  <span className="muted small">not found: deleted or renamed since it was picked; untick it</span>
                </label>
              </li>
            );
          })}
        </ul>
      )}
      {error && (
        <span className="field-error" role="alert" id={`${id}-error`}>
          {error}
        </span>
      )}
    </div>
  );
}

/** A picked LoRA's strength: a slider over LORA_SCALE and its value. */
function ScaleSlider({ label, scale, onScale }: { label: string; scale: number; onScale: (scale: number) => void }) {
  return (
    <span className="scale">
      <input
        type="range"
        min={LORA_SCALE.min}
        max={LORA_SCALE.max}
        step={0.05}
        value={scale}
        aria-label={`scale of ${label}`}
        onChange={(e) => onScale(Number(e.target.value))}
      />
      <code>{scale.toFixed(2)}</code>
    </span>
  );
}
