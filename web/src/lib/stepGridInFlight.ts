/**
 * The Generate screen's LoRA-by-step grid, kept outside the screen (as lib/generationInFlight
 * keeps a single generation): its loop goes on sending the remaining steps while the user looks
 * at another screen of the app, so a Generate screen mounted meanwhile shows the grid running (its
 * progress, its images so far, Cancel) and its images when it ends, instead of an idle grid. One
 * grid at a time, per browser tab (module state); the last grid's images stay until the next
 * grid starts. While it runs, a reload or closing the tab asks first (lib/leaveGuard).
 */
import { useSyncExternalStore } from "react";
import { ApiError } from "../api/client";
import { api } from "../api/endpoints";
import type { GenerateBody, GenerateResult } from "../api/types";
import type { LoraPick } from "../components/LoraPicker";
import { newRequestId } from "./generateRequest";
import { holdLeave } from "./leaveGuard";

/** One image of the grid: the step's label and its answer. */
export interface GridCell {
  label: string;
  result: GenerateResult;
}

/** One image to render: its label and the LoRA (with or without a step) it is rendered with. */
export interface GridItem {
  label: string;
  lora: LoraPick;
}

export interface GridView {
  /** The LoRA the grid compares (null: no grid yet in this tab). */
  pick: LoraPick | null;
  /** The images rendered so far, in the order asked. */
  cells: GridCell[];
  /** How many images the grid asked for. */
  total: number;
  /** Whether its loop is sending now. */
  running: boolean;
  /** Why it stopped before its last image (a refusal), or null. */
  error: string | null;
  /** Whether Cancel was pressed (the grid stops after the image being rendered, or in it). */
  cancelled: boolean;
  /** How many grids ended in this tab (a Generate screen reloads its gallery when it grows). */
  finished: number;
}

/** Sends one image (the screen's generate, with its GPU-busy retries); `stopped`: Cancel was pressed. */
/** Send one generation and follow it to its image; `onSent` is told each request id sent (a retry sends a new one). */
export type Generate = (body: GenerateBody, stopped: () => boolean, onSent?: (requestId: string) => void) => Promise<GenerateResult>;

const IDLE: GridView = { pick: null, cells: [], total: 0, running: false, error: null, cancelled: false, finished: 0 };
let view: GridView = IDLE;
/** The image being rendered now (for Cancel), and whether Cancel was pressed. */
let rendering: { requestId: string | null; cancelled: boolean } = { requestId: null, cancelled: false };
const listeners = new Set<() => void>();

function subscribe(listener: () => void): () => void {
  listeners.add(listener);
  return () => listeners.delete(listener);
}

function update(change: Partial<GridView>): void {
  view = { ...view, ...change };
  holdLeave("step-grid", view.running); // a reload or closing the tab would stop it: the browser asks first
  for (const listener of listeners) listener();
}

/** The grid as it is now (re-rendered on each change). */
export function useStepGrid(): GridView {
  return useSyncExternalStore(subscribe, () => view);
}

/** Whether a grid is being rendered now. */
export function gridRunning(): boolean {
  return view.running;
}

/**
 * Render `items` of `pick` one after another with `body`'s settings (each its own request id, for
 * Cancel), keeping each image as it comes. Nothing is sent while a grid runs already. Resolves
 * when the grid ends (every image, a refusal, or Cancel).
 */
export async function renderGrid(pick: LoraPick, items: readonly GridItem[], body: Omit<GenerateBody, "loras">, generate: Generate): Promise<void> {
  if (view.running) return;
  const mine = { requestId: null as string | null, cancelled: false };
  rendering = mine;
  update({ pick, cells: [], total: items.length, running: true, error: null, cancelled: false });
  try {
    for (const item of items) {
      if (mine.cancelled) break;
      mine.requestId = newRequestId();
      const result = await generate(
        { ...body, loras: [item.lora], request_id: mine.requestId },
        () => mine.cancelled,
        (id) => (mine.requestId = id), // Cancel grid reaches a retry's request too
      );
      if (rendering !== mine) return; // forgotten meanwhile
      update({ cells: [...view.cells, { label: item.label, result }] });
    }
  } catch (err) {
    if (rendering !== mine) return;
    // a 409 of the image being rendered when Cancel was pressed: it stopped, as asked
    if (!(mine.cancelled && err instanceof ApiError && err.status === 409)) update({ error: err instanceof Error ? err.message : String(err) });
  } finally {
    mine.requestId = null;
    if (rendering === mine) update({ running: false, finished: view.finished + 1 });
  }
}

/** Cancel the grid: the image being rendered stops after its current denoising step (a 404: it had
 * just ended) and no further image is sent. Throws what else the server answered. */
export async function cancelGrid(): Promise<void> {
  const mine = rendering;
  if (!view.running || mine.cancelled) return;
  mine.cancelled = true;
  update({ cancelled: true });
  if (!mine.requestId) return;
  try {
    await api.cancelGenerate(mine.requestId, null); // the grid outlives its screen
  } catch (err) {
    if (!(err instanceof ApiError && err.status === 404)) throw err;
  }
}

/** Forget the grid (tests: each starts with none). */
export function forgetGrid(): void {
  rendering.cancelled = true;
  rendering = { requestId: null, cancelled: false };
  view = IDLE;
  holdLeave("step-grid", false);
}
