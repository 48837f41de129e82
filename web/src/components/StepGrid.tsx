import { useEffect, useState } from "react";
import { api } from "../api/endpoints";
import type { GenerateBody, GenerateResult, LoraSteps } from "../api/types";
import type { LoraPick } from "./LoraPicker";
import { ErrorBanner } from "./ErrorBanner";

type StepLora = LoraSteps["loras"][number];

interface Cell {
  label: string;
  result: GenerateResult;
}

interface Props {
  /** The one LoRA picked in the form (the grid compares its steps). */
  pick: LoraPick;
  /** The form's settings (prompt, seed, size...) without LoRAs. */
  body: Omit<GenerateBody, "loras">;
  /** Generates one image (with the screen's GPU-busy retries). */
  generate: (body: GenerateBody) => Promise<GenerateResult>;
  /** Called when the grid is done (the gallery has new images). */
  onDone: () => void;
  busy: boolean;
  setBusy: (busy: boolean) => void;
}

const stepLabel = (item: StepLora) => (item.final ? `final (step ${item.step ?? "?"})` : `step ${item.step}`);
/** The validation marks of a step's LoRA (a run with validation_split): " · best", " · last". */
const marks = (item: StepLora) => `${item.best ? " · best" : ""}${item.last ? " · last" : ""}`;

/**
 * Compare a LoRA over its training steps: one prompt and seed rendered with each chosen
 * snapshot (loras/<name>-step-N) and the final file, side by side. Every image is kept in the
 * gallery with its prompt, seed and LoRA step.
 */
export function StepGrid({ pick, body, generate, onDone, busy, setBusy }: Props) {
  const [steps, setSteps] = useState<StepLora[] | null>(null);
  const [chosen, setChosen] = useState<Set<string>>(new Set());
  const [cells, setCells] = useState<Cell[]>([]);
  const [error, setError] = useState<string | null>(null);

  useEffect(() => {
    setSteps(null);
    setCells([]);
    api.loraSteps(pick.name).then(
      (res) => {
        setSteps(res.loras);
        setChosen(new Set(res.loras.map(stepLabel)));
      },
      () => setSteps([]),
    );
  }, [pick.name]);

  if (!steps || steps.length < 2) return null; // nothing to compare

  const toggle = (label: string) =>
    setChosen((old) => {
      const next = new Set(old);
      if (next.has(label)) next.delete(label);
      else next.add(label);
      return next;
    });

  const render = async () => {
    setBusy(true);
    setError(null);
    setCells([]);
    try {
      for (const item of steps.filter((s) => chosen.has(stepLabel(s)))) {
        const lora = item.final ? { name: pick.name, scale: pick.scale } : { name: pick.name, scale: pick.scale, step: item.step };
        const result = await generate({ ...body, loras: [lora] });
        setCells((old) => [...old, { label: stepLabel(item), result }]);
      }
    } catch (err) {
      setError(err instanceof Error ? err.message : String(err));
    } finally {
      setBusy(false);
      onDone();
    }
  };

  return (
    <div className="card step-grid" data-testid="step-grid">
      <h3>Compare {pick.name} over its steps</h3>
      <div className="step-choices">
        {steps.map((item) => (
          <label key={stepLabel(item)}>
            <input type="checkbox" checked={chosen.has(stepLabel(item))} onChange={() => toggle(stepLabel(item))} />{" "}
            {stepLabel(item)}
            {marks(item)}
          </label>
        ))}
      </div>
      <ErrorBanner message={error} />
      <button type="button" className="secondary" disabled={busy || chosen.size === 0} onClick={() => void render()}>
        {busy ? "Rendering…" : `Render grid (${chosen.size} images, same prompt and seed)`}
      </button>
      {cells.length > 0 && (
        <div className="step-cells">
          {cells.map((cell) => (
            <figure key={`${cell.label}-${cell.result.file}`}>
              <img src={api.imageUrl(cell.result.url)} alt={`${pick.name} ${cell.label}`} />
              <figcaption className="small">{cell.label}</figcaption>
            </figure>
          ))}
        </div>
      )}
    </div>
  );
}
