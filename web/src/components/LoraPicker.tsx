import { api } from "../api/endpoints";
import { LORA_SCALE } from "../api/limits.gen";
import type { Lora, LoraRef } from "../api/types";
import { formatBytes } from "../lib/format";

/** A chosen LoRA and its scale. */
export type LoraPick = Required<Pick<LoraRef, "name" | "scale">>;

interface Props {
  loras: readonly Lora[];
  picks: readonly LoraPick[];
  onChange: (picks: LoraPick[]) => void;
  family: string;
}

/** The trained LoRAs of a family: a checkbox and a scale slider each, and a download link. */
export function LoraPicker({ loras, picks, onChange, family }: Props) {
  const toggle = (name: string) =>
    onChange(picks.some((p) => p.name === name) ? picks.filter((p) => p.name !== name) : [...picks, { name, scale: 1 }]);
  const setScale = (name: string, scale: number) =>
    onChange(picks.map((p) => (p.name === name ? { ...p, scale } : p)));

  return (
    <div className="field wide">
      <span className="field-label">LoRAs</span>
      {loras.length === 0 ? (
        <span className="muted small lora-empty">
          No trained {family} LoRA yet. <a href="#/train">Train one</a> and it appears here.
        </span>
      ) : (
        <ul className="lora-list">
          {loras.map((l) => {
            const pick = picks.find((p) => p.name === l.name);
            return (
              <li key={l.name} className={pick ? "picked" : undefined}>
                <label className="check lora-name" title={l.path}>
                  <input type="checkbox" checked={!!pick} onChange={() => toggle(l.name)} aria-label={`use LoRA ${l.name}`} />
                  <span className="filename">{l.name}</span>
                  {l.weights === "ema" && (
                    <span className="chip small" title="holds the EMA weights; the raw ones are on the run's page (LoRA by step)">
                      EMA
                    </span>
                  )}
                </label>
                <span className="lora-tools">
                  {pick ? (
                    <span className="scale">
                      <input
                        type="range"
                        min={LORA_SCALE.min}
                        max={LORA_SCALE.max}
                        step={0.05}
                        value={pick.scale}
                        aria-label={`scale of ${l.name}`}
                        onChange={(e) => setScale(l.name, Number(e.target.value))}
                      />
                      <code>{pick.scale.toFixed(2)}</code>
                    </span>
                  ) : (
                    <span className="muted small">{formatBytes(l.bytes)}</span>
                  )}
                  <a
                    className="button ghost small"
                    href={api.loraFileUrl(l.name)}
                    download
                    aria-label={`download LoRA ${l.name}`}
                    title="Download the .safetensors"
                  >
                    ↓
                  </a>
                </span>
              </li>
            );
          })}
        </ul>
      )}
    </div>
  );
}
