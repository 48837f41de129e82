/**
 * The Generate screen's view of its single generation: busy (its progress; Cancel by its request id)
 * while it runs, then its image selected in the reloaded gallery, or what went wrong (each problem next to
 * its input, a reused image's changed LoRA or base said on their own). The flight itself lives
 * outside the screen (lib/generationInFlight): a screen mounted while one runs follows it.
 */
import { useEffect, useRef, useState } from "react";
import { ApiError, unheeded } from "../api/client";
import { api } from "../api/endpoints";
import { type InFlight, inFlight, resumed } from "./generationInFlight";
import { GenerationGone, progressWords } from "./generationPoll";
import { baseChanged, changedLoras } from "./generateRequest";
import { isAbort, useUnmountSignal } from "./latest";
import { placeProblems } from "./problems";

/** The GenerateBody fields the form has an input for (a problem of another goes to the banner only). */
const GENERATE_INPUTS: ReadonlySet<string> = new Set([
  "base_model", "base_config", "loras", "references", "prompt", "guidance", "negative_prompt", "max_sequence_length", "seed", "steps", "width", "height",
]);

/** The generation's view; `loadGallery(file)` reloads the gallery showing `file`. */
export function useGenerationView(loadGallery: (select?: string) => Promise<void>) {
  const [seconds, setSeconds] = useState<number | null>(null);
  // what the server said of how the image just made was made (GenerateOut.warnings: a DoRA read by a guessed rule)
  const [warnings, setWarnings] = useState<string[]>([]);
  const [busy, setBusy] = useState(false);
  const [progress, setProgress] = useState<string | null>(null); // "Step 3 of 20" of the generation in flight
  // the generation in flight (its request_id, for Cancel; the flight itself outlives this screen)
  const [requestId, setRequestId] = useState<string | null>(null);
  const [notice, setNotice] = useState<string | null>(null);
  const [errors, setErrors] = useState<Record<string, string>>({});
  const [general, setGeneral] = useState<string | null>(null);
  // the picked LoRAs the server refused as changed since the reused image was made (their sha256)
  const [changed, setChanged] = useState<string[]>([]);
  const [staleBase, setStaleBase] = useState<string | null>(null); // the base model refused as changed (base_identity)
  // a generation in flight: a second submit (Enter twice, Ctrl+Enter and a click) sends nothing
  const generating = useRef(false);
  const mounted = useUnmountSignal();

  /** Show `flight` until it ends: busy (Cancel) meanwhile, then its image, or what went wrong (each
   * problem next to its input). Also a generation sent before this screen was last left. */
  const follow = async (flight: InFlight) => {
    generating.current = true;
    setRequestId(flight.requestId);
    setBusy(true);
    setErrors({});
    setGeneral(null);
    setNotice(null);
    setChanged([]);
    setStaleBase(null);
    setWarnings([]);
    setProgress(flight.status ? progressWords(flight.status) : null);
    flight.watch = (status) => {
      if (!mounted().aborted) setProgress(progressWords(status));
    };
    try {
      // left meanwhile: the flight goes on (lib/generationInFlight: the next screen follows it), this view hears nothing
      const res = await unheeded(flight.result, mounted());
      setGeneral(null);
      setSeconds(res.seconds);
      setWarnings(res.warnings ?? []);
      await loadGallery(res.file);
    } catch (err) {
      if (isAbort(err)) return;
      if (flight.resumed && err instanceof GenerationGone) {
        await loadGallery(); // found again after a reload, but the server forgot it (it restarted): its image, if made, is there
        return;
      }
      if (flight.cancelled && err instanceof ApiError && err.status === 409) {
        setGeneral(null); // the server stopped it between denoising steps: nothing kept
        setNotice("Generation cancelled: nothing was kept.");
        return;
      }
      // each problem next to its input (a LoRA's, "loras.1.scale", under the LoRA list); the banner
      // says those no input shows (as the Train form's)
      const placed =
        err instanceof ApiError && err.problems.some((p) => p.field)
          ? placeProblems(err.problems, (f) => GENERATE_INPUTS.has(f))
          : null;
      if (placed) setErrors(placed.fields);
      // a reused image's LoRA file changed since: said on its own, with the choice of the file as it is now
      const stale = changedLoras(err, flight.sending);
      setChanged(stale);
      const base = baseChanged(err); // the base model's files changed since: said on its own too
      setStaleBase(base ? flight.baseModel : null);
      const onlyStale = (stale.length > 0 || base) && err instanceof ApiError && stale.length + Number(base) === err.problems.length;
      setGeneral(onlyStale ? null : placed ? placed.general.join("; ") || null : err instanceof Error ? err.message : String(err));
    } finally {
      if (flight.watch && !mounted().aborted) flight.watch = null;
      generating.current = false;
      setBusy(false);
      setRequestId(null);
      setProgress(null);
    }
  };
  // a generation sent before this screen was left (or this page reloaded) goes on on the server: shown as running, its image when done
  useEffect(() => {
    const flight = inFlight() ?? resumed();
    if (flight) void follow(flight);
    // eslint-disable-next-line react-hooks/exhaustive-deps -- once, on mount
  }, []);

  /** Cancel the generation in flight: the server stops it after its current denoising step, or while
   * loading before its next component (a 404: it had not started, or just ended; a wait for the
   * GPU stops retrying). */
  const cancel = async () => {
    const flight = inFlight();
    if (!flight || flight.requestId !== requestId) return;
    flight.cancelled = true;
    try {
      await api.cancelGenerate(flight.requestId, mounted()); // left meanwhile: it stops, nothing is said here
    } catch (err) {
      if (isAbort(err)) return;
      if (!(err instanceof ApiError && err.status === 404)) setGeneral(err instanceof Error ? err.message : String(err));
    }
  };

  return {
    seconds, warnings, busy, progress, requestId, notice, errors, setErrors, general, setGeneral, changed, setChanged, staleBase, setStaleBase,
    generating, follow, cancel,
  };
}
