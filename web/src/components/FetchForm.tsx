import { type FormEvent, useState } from "react";
import { ApiError } from "../api/client";
import { api } from "../api/endpoints";
import type { Fetch } from "../api/types";
import { Field } from "./Field";
import { isAbort, useAction, useUnmountSignal } from "../lib/latest";
import { HubTokenDialog } from "./HubTokenDialog";
import { ErrorBanner } from "./ErrorBanner";

/** Fetch a base model from the hub: repo id and revision; a gated repo (403) asks for a token and tries again with it. */
export function FetchForm({ onStarted }: { onStarted: (fetch: Fetch) => void }) {
  const [repo, setRepo] = useState("");
  const [revision, setRevision] = useState("");
  const [error, setError] = useState<string | null>(null);
  const [denied, setDenied] = useState<string | null>(null);
  const mounted = useUnmountSignal(); // left meanwhile: the fetch runs, nobody is called back
  // one request per click: Enter and a click start one fetch
  const action = useAction(async (token?: string) => {
    setError(null);
    try {
      const fetch = await api.fetchModel({ repo_id: repo.trim(), revision: revision.trim() || null, ...(token ? { token } : {}) }, mounted());
      setDenied(null);
      onStarted(fetch);
    } catch (err) {
      if (isAbort(err)) return;
      if (err instanceof ApiError && err.status === 403) setDenied(err.message);
      else setError(err instanceof Error ? err.message : String(err));
    }
  });
  const busy = action.pending;
  const start = action.run;
  const submit = (e: FormEvent) => {
    e.preventDefault();
    void start();
  };
  return (
    <>
      <form className="card fetch-form" onSubmit={submit}>
        <h2>Fetch from the hub</h2>
        <div className="grid">
          <Field label="Hub model id" hint="owner/name of a diffusers pipeline" wide>
            <input name="repo_id" value={repo} placeholder="black-forest-labs/FLUX.1-dev" autoComplete="off" spellCheck={false} onChange={(e) => setRepo(e.target.value)} />
          </Field>
          <Field label="Revision" hint="branch, tag or commit (blank: main)">
            <input name="revision" value={revision} placeholder="main" autoComplete="off" spellCheck={false} onChange={(e) => setRevision(e.target.value)} />
          </Field>
        </div>
        <ErrorBanner message={error} />
        <button type="submit" className="primary" disabled={busy || !repo.trim()}>
          {busy ? "Checking…" : "Fetch"}
        </button>
      </form>
      {denied && <HubTokenDialog repo={repo.trim()} message={denied} onToken={(t) => void start(t)} onClose={() => setDenied(null)} />}
    </>
  );
}
