import { type FormEvent, useEffect, useState } from "react";
import { ApiError } from "../api/client";
import { api } from "../api/endpoints";
import { useInfo } from "../api/info";
import { useTraining } from "../api/training";
import type { GenerateResult, Lora } from "../api/types";
import { Field } from "../components/Field";
import { addToGallery, type GalleryItem, loadGallery } from "../lib/gallery";
import { defaultBaseModel } from "./TrainScreen";

const LIVE = new Set(["queued", "preparing", "running", "stopping"]);
const GPU_RETRIES = 15;

interface Pick {
  name: string;
  scale: number;
}

/** Generate: base model + trained LoRAs with scales, prompt, seed, steps, size; result and gallery. */
export function GenerateScreen() {
  const { info } = useInfo();
  const { job } = useTraining();
  const [family, setFamily] = useState("flux");
  const [baseModel, setBaseModel] = useState("");
  const [loras, setLoras] = useState<Lora[]>([]);
  const [picks, setPicks] = useState<Pick[]>([]);
  const [prompt, setPrompt] = useState("a red circle on a blue background");
  const [seed, setSeed] = useState("0");
  const [steps, setSteps] = useState("20");
  const [width, setWidth] = useState("512");
  const [height, setHeight] = useState("512");
  const [result, setResult] = useState<GenerateResult | null>(null);
  const [gallery, setGallery] = useState<GalleryItem[]>(loadGallery);
  const [busy, setBusy] = useState(false);
  const [errors, setErrors] = useState<Record<string, string>>({});
  const [general, setGeneral] = useState<string | null>(null);

  useEffect(() => {
    if (info && !baseModel) setBaseModel(defaultBaseModel(info, family));
  }, [info, family, baseModel]);
  useEffect(() => {
    api.loras(family).then((l) => setLoras(l.loras), () => setLoras([]));
  }, [family]);

  const toggle = (name: string) =>
    setPicks((p) => (p.some((x) => x.name === name) ? p.filter((x) => x.name !== name) : [...p, { name, scale: 1 }]));

  const submit = async (e: FormEvent) => {
    e.preventDefault();
    setBusy(true);
    setErrors({});
    setGeneral(null);
    const body = {
      family,
      base_model: baseModel,
      prompt,
      seed: Number(seed),
      steps: Number(steps),
      width: Number(width),
      height: Number(height),
      loras: picks,
    };
    try {
      // A run that has just ended may still be releasing the GPU: retry a 409 briefly, unless a
      // job is really still live (then the server's message says why).
      let res = null;
      for (let attempt = 0; res == null; attempt++) {
        try {
          res = await api.generate(body);
        } catch (err) {
          const jobLive = job != null && LIVE.has(job.status);
          if (!(err instanceof ApiError && err.status === 409) || jobLive || attempt >= GPU_RETRIES) throw err;
          setGeneral("Waiting for the finished training run to release the GPU…");
          await new Promise((r) => setTimeout(r, 1000));
        }
      }
      setGeneral(null);
      setResult(res);
      setGallery(addToGallery(res, prompt));
    } catch (err) {
      if (err instanceof ApiError && err.problems.some((p) => p.field)) setErrors(err.byField());
      setGeneral(err instanceof Error ? err.message : String(err));
    } finally {
      setBusy(false);
    }
  };

  return (
    <section className="screen">
      <div className="screen-head">
        <h1>Generate</h1>
      </div>
      <div className="generate">
        <form className="card gen-form" onSubmit={(e) => void submit(e)}>
          <div className="family-picker" role="radiogroup" aria-label="model family">
            {(info?.families ?? []).map((f) => (
              <button
                type="button"
                key={f.name}
                role="radio"
                aria-checked={f.name === family}
                className={f.name === family ? "seg active" : "seg"}
                onClick={() => {
                  setFamily(f.name);
                  setPicks([]);
                  if (info) setBaseModel(defaultBaseModel(info, f.name));
                }}
              >
                {f.title}
              </button>
            ))}
          </div>
          <Field label="Base model" error={errors.base_model} wide>
            <input name="gen_base_model" list="gen-models" value={baseModel} onChange={(e) => setBaseModel(e.target.value)} />
            <datalist id="gen-models">
              {(info?.models ?? []).map((m) => (
                <option key={m.path} value={m.path}>
                  {m.name}
                </option>
              ))}
            </datalist>
          </Field>
          <div className="field wide">
            <span className="field-label">LoRAs</span>
            {loras.length === 0 && <span className="muted small">No trained LoRAs for this family yet.</span>}
            <ul className="lora-list">
              {loras.map((l) => {
                const pick = picks.find((p) => p.name === l.name);
                return (
                  <li key={l.name} className={pick ? "picked" : undefined}>
                    <label className="check">
                      <input type="checkbox" checked={!!pick} onChange={() => toggle(l.name)} aria-label={`use LoRA ${l.name}`} />
                      {l.name}
                    </label>
                    {pick && (
                      <span className="scale">
                        <input
                          type="range"
                          min={-2}
                          max={2}
                          step={0.05}
                          value={pick.scale}
                          aria-label={`scale of ${l.name}`}
                          onChange={(e) =>
                            setPicks(picks.map((p) => (p.name === l.name ? { ...p, scale: Number(e.target.value) } : p)))
                          }
                        />
                        <code>{pick.scale.toFixed(2)}</code>
                      </span>
                    )}
                  </li>
                );
              })}
            </ul>
          </div>
          <Field label="Prompt" error={errors.prompt} wide>
            <textarea name="prompt" rows={3} value={prompt} onChange={(e) => setPrompt(e.target.value)} />
          </Field>
          <div className="grid compact">
            <Field label="Seed" error={errors.seed}>
              <input name="gen_seed" inputMode="numeric" value={seed} onChange={(e) => setSeed(e.target.value)} />
            </Field>
            <Field label="Steps" error={errors.steps}>
              <input name="gen_steps" inputMode="numeric" value={steps} onChange={(e) => setSteps(e.target.value)} />
            </Field>
            <Field label="Width" error={errors.width}>
              <input name="gen_width" inputMode="numeric" value={width} onChange={(e) => setWidth(e.target.value)} />
            </Field>
            <Field label="Height" error={errors.height}>
              <input name="gen_height" inputMode="numeric" value={height} onChange={(e) => setHeight(e.target.value)} />
            </Field>
          </div>
          {general && (
            <div className="banner error" role="alert">
              {general}
            </div>
          )}
          <button type="submit" className="primary" disabled={busy}>
            {busy ? "Generating…" : "Generate"}
          </button>
        </form>
        <div className="card result">
          {result ? (
            <figure>
              <img src={result.url} alt="generated image" data-testid="result-image" />
              <figcaption className="muted small">
                seed {result.seed} · {result.width}×{result.height} · {result.seconds.toFixed(1)} s
              </figcaption>
            </figure>
          ) : (
            <div className="empty">{busy ? "Generating…" : "The image appears here."}</div>
          )}
        </div>
      </div>
      {gallery.length > 0 && (
        <>
          <h3>Gallery</h3>
          <div className="gallery">
            {gallery.map((g) => (
              <a key={g.url} href={g.url} target="_blank" rel="noreferrer" title={g.prompt}>
                <img src={g.url} alt={g.prompt} loading="lazy" />
              </a>
            ))}
          </div>
        </>
      )}
    </section>
  );
}
