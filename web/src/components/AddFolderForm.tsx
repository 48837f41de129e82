import { type FormEvent, useState } from "react";
import { api } from "../api/endpoints";
import type { CatalogueModel } from "../api/types";
import { Field } from "./Field";
import { isAbort, useAction, useUnmountSignal } from "../lib/latest";

/** List an existing pipeline folder (an absolute path on the server) in the catalogue; lorastudio never writes to it. */
export function AddFolderForm({ onAdded }: { onAdded: (model: CatalogueModel) => void }) {
  const [path, setPath] = useState("");
  const [error, setError] = useState<string | null>(null);
  const mounted = useUnmountSignal(); // left meanwhile: the folder is added, nobody is called back
  // one request per click: Enter and a click add the folder once
  const add = useAction(async () => {
    setError(null);
    try {
      onAdded(await api.addModelFolder(path.trim(), mounted()));
      setPath("");
    } catch (err) {
      if (isAbort(err)) return;
      setError(err instanceof Error ? err.message : String(err));
    }
  });
  const submit = async (e: FormEvent) => {
    e.preventDefault();
    await add.run();
  };
  return (
    <form className="card" onSubmit={(e) => void submit(e)}>
      <h2>Add a folder</h2>
      <Field label="Folder on the server" error={error ?? undefined} hint="absolute path of a diffusers pipeline (model_index.json)" wide>
        <input name="model_folder" value={path} placeholder="/data/models/my-sdxl" autoComplete="off" spellCheck={false} onChange={(e) => setPath(e.target.value)} />
      </Field>
      <button type="submit" className="secondary" disabled={!path.trim() || add.pending}>
        Add folder
      </button>
    </form>
  );
}
