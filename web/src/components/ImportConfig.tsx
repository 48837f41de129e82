/**
 * "Import a config" on the Train page: another trainer's config file (ai-toolkit's YAML job, kohya
 * sd-scripts' / musubi-tuner's arguments, SimpleTuner's config.json, OneTrainer's export) read in
 * the browser, sent as text to POST /api/config/import, and its settings handed to the form with
 * the report of every one of its settings (carried, changed in meaning, not carried: why).
 */
import { useState } from "react";
import { ApiError } from "../api/client";
import { api } from "../api/endpoints";
import type { ConfigImport } from "../api/types";
import { isAbort, useUnmountSignal } from "../lib/latest";
import { ErrorBanner } from "./ErrorBanner";

/** A chosen file's text, refused when it is not UTF-8 (never read with replacement characters);
 * FileReader: what every browser, and the tests' jsdom, has. */
function readText(file: File): Promise<string> {
  return new Promise((resolve, reject) => {
    const reader = new FileReader();
    reader.onload = () => {
      try {
        resolve(new TextDecoder("utf-8", { fatal: true }).decode(reader.result as ArrayBuffer));
      } catch {
        reject(new Error(`${file.name} is not UTF-8 text: save it as UTF-8`));
      }
    };
    reader.onerror = () => reject(reader.error ?? new Error(`${file.name} could not be read`));
    reader.readAsArrayBuffer(file);
  });
}

/** The file chooser; `onImported` gets the answer and the file's name (a refusal shows here). */
export function ImportConfig({ onImported }: { onImported: (result: ConfigImport, name: string) => void }) {
  const [error, setError] = useState<string | null>(null);
  const [busy, setBusy] = useState(false);
  const mounted = useUnmountSignal();
  const pick = async (file: File | undefined) => {
    if (!file) return;
    setError(null);
    setBusy(true);
    try {
      const text = await readText(file);
      onImported(await api.importConfig({ name: file.name, text }, mounted()), file.name);
    } catch (err) {
      if (isAbort(err)) return;
      const problems = err instanceof ApiError ? err.problems.map((p) => `${p.field}: ${p.message}`) : [];
      setError(problems.length ? problems.join("; ") : err instanceof Error ? err.message : String(err));
    } finally {
      setBusy(false);
    }
  };
  return (
    <div className="import-config">
      <label>
        Import a config from another trainer (ai-toolkit, kohya, SimpleTuner, OneTrainer){" "}
        <input
          type="file"
          name="import_config"
          accept=".yaml,.yml,.toml,.json"
          disabled={busy}
          onChange={(e) => {
            void pick(e.target.files?.[0]);
            e.target.value = ""; // the same file chosen again imports again
          }}
        />
      </label>
      <ErrorBanner message={error} testId="import-error" />
    </div>
  );
}

/** What an import brought: the counts, and each of the file's settings with its fate. */
export function ImportReport({ result, name }: { result: ConfigImport; name: string }) {
  const count = (o: string) => result.report.filter((l) => l.outcome === o).length;
  const noData = !("datasets" in result.config) && !("data_dir" in result.config);
  return (
    <div className="banner info" data-testid="import-note">
      Settings of {name} ({result.trainer}): {count("carried")} carried, {count("changed")} changed in meaning,{" "}
      {count("not carried")} not carried.{noData && " Its image folders were not brought: choose the dataset."}
      <details>
        <summary>Every setting of the file</summary>
        <ul>
          {result.report.map((line, i) => (
            <li key={i} className={`import-${line.outcome.replace(" ", "-")}`}>
              <code>{line.peer}</code>
              {line.ours ? (
                <>
                  {" -> "}
                  <code>{line.ours}</code> = {JSON.stringify(line.value)}
                </>
              ) : null}
              {line.note ? `: ${line.outcome === "changed" ? "changed: " : line.outcome === "not carried" ? "not carried: " : ""}${line.note}` : ""}
            </li>
          ))}
        </ul>
      </details>
    </div>
  );
}
