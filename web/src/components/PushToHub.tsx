import { useState } from "react";
import { api } from "../api/endpoints";
import { isAbort, useAction, useUnmountSignal } from "../lib/latest";
import type { PushResult } from "../api/types";
import { ErrorBanner } from "./ErrorBanner";
import { useToggleFocus } from "../lib/toggleFocus";

interface Props {
  /** The run's output name (its LoRA is outputs/<name>/<name>.safetensors). */
  name: string;
}

const REPO = /^[A-Za-z0-9][\w.-]*\/[\w.-]+$/;

/**
 * "Push to hub" for a run with a LoRA: asks the repo id (owner/name), optionally creates it
 * (private or not), and uploads the LoRA with its sidecar, a generated model card and its newest
 * samples with the studio's hub token (POST /api/loras/{name}/push). Shows the repo link when
 * done, the server's message when refused (no token, token refused, repo missing).
 */
export function PushToHub({ name }: Props) {
  const [open, setOpen] = useState(false);
  const [repo, setRepo] = useState("");
  const [create, setCreate] = useState(false);
  const [priv, setPriv] = useState(false);
  const [done, setDone] = useState<PushResult | null>(null);
  const [error, setError] = useState<string | null>(null);
  const mounted = useUnmountSignal(); // left meanwhile: the push goes on, its answer is dropped
  const valid = REPO.test(repo.trim());
  // one upload per click: Enter and a click push once
  const action = useAction(async () => {
    setError(null);
    try {
      setDone(await api.pushLora(name, { repo: repo.trim(), create, private: create && priv }, mounted()));
    } catch (err) {
      if (isAbort(err)) return;
      setError(err instanceof Error ? err.message : String(err));
    }
  });
  const busy = action.pending;
  // the focus to the form opened, back to the button on Close (or Escape)
  const toggled = useToggleFocus(open, busy ? undefined : () => setOpen(false));
  const push = action.run;
  if (!open) {
    return (
      <button ref={toggled} className="ghost" onClick={() => setOpen(true)} aria-label={`Push to hub: ${name}`}>
        Push to hub…
      </button>
    );
  }
  return (
    <form
      ref={toggled}
      className="card push-hub"
      data-testid="push-hub"
      onSubmit={(e) => {
        e.preventDefault();
        if (valid && !busy) void push();
      }}
    >
      <h2>Push to hub</h2>
      <label>
        Repo id
        <input
          name="hub_repo"
          placeholder="you/my-lora"
          value={repo}
          disabled={busy}
          onChange={(e) => setRepo(e.target.value)}
          aria-invalid={repo !== "" && !valid}
        />
      </label>
      <label className="check">
        <input type="checkbox" checked={create} disabled={busy} onChange={(e) => setCreate(e.target.checked)} /> Create the
        repo if it does not exist
      </label>
      {create && (
        <label className="check">
          <input type="checkbox" checked={priv} disabled={busy} onChange={(e) => setPriv(e.target.checked)} /> Private
        </label>
      )}
      <p className="muted small">Uploads the LoRA, its settings (JSON), a model card and the newest sample images, with the studio's hub token.</p>
      <ErrorBanner message={error} />
      {done && (
        <div className="banner ok" role="status">
          Pushed {done.files.length} files to{" "}
          <a href={done.url} target="_blank" rel="noreferrer">
            {done.repo_id}
          </a>
        </div>
      )}
      <div className="train-longer-actions">
        <button type="submit" className="primary" disabled={!valid || busy}>
          {busy ? "Pushing…" : "Push"}
        </button>
        <button type="button" className="ghost" disabled={busy} onClick={() => setOpen(false)}>
          Close
        </button>
      </div>
    </form>
  );
}
