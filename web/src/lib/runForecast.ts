/**
 * The Check's time forecast of a run this tab started (PreflightOut.time), kept by the job's id so
 * that the Live page's ETA can show it, labelled a forecast, while the run prepares (text encoders,
 * captions, latents: no step yet to measure a pace by). In this tab's sessionStorage (a reload
 * keeps it); a run started without a Check, from the CLI or another tab has none. Storage that is
 * full or blocked keeps none: a forecast is a convenience, never an error.
 */
import type { PreflightReport } from "../api/types";

const KEY = "lorastudio.runForecasts";
const KEPT = 20; // the newest runs' forecasts; older ones are dropped

/** The forecast wall seconds of a run from its worker's start to its end. */
export interface RunForecast {
  total_s: number;
  confidence?: string;
}

function readAll(): Record<string, RunForecast> {
  try {
    const value: unknown = JSON.parse(window.sessionStorage.getItem(KEY) ?? "{}");
    return value && typeof value === "object" && !Array.isArray(value) ? (value as Record<string, RunForecast>) : {};
  } catch {
    return {}; // storage blocked, or not JSON
  }
}

/** Keep the Check's forecast (null: it gave none) of the run `jobId` just started with its settings. */
export function keepForecast(jobId: string, time: PreflightReport["time"] | null | undefined): void {
  if (!time || !Number.isFinite(time.total_s)) return;
  const all = Object.entries(readAll()).filter(([id]) => id !== jobId).slice(-(KEPT - 1));
  all.push([jobId, { total_s: time.total_s, confidence: time.confidence }]);
  try {
    window.sessionStorage.setItem(KEY, JSON.stringify(Object.fromEntries(all)));
  } catch {
    // quota or blocked storage: the ETA stays "–" until the steps measure one
  }
}

/** The forecast kept for run `jobId`, or null. */
export function forecastOf(jobId: string): RunForecast | null {
  const f = readAll()[jobId];
  return f && typeof f.total_s === "number" && Number.isFinite(f.total_s) ? f : null;
}

/** Seconds left by the forecast after `elapsed` seconds of the run (0 once past it), null without either. */
export function forecastLeft(forecast: RunForecast | null, elapsed: number | null): number | null {
  if (!forecast || elapsed == null || !Number.isFinite(elapsed)) return null;
  return Math.max(0, forecast.total_s - elapsed);
}
