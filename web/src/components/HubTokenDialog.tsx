import { type FormEvent, useState } from "react";
import { Dialog } from "./Dialog";

/**
 * Asks for a hub token when a repo is gated or private and the studio's own token cannot read it. The token is
 * sent with this one fetch only: the server neither stores it nor shows it back.
 */
export function HubTokenDialog({ repo, message, onToken, onClose }: { repo: string; message: string; onToken: (token: string) => void; onClose: () => void }) {
  const [value, setValue] = useState("");
  const save = (e?: FormEvent) => {
    e?.preventDefault();
    if (value.trim()) onToken(value.trim());
  };
  return (
    <Dialog
      title={`Access to ${repo}`}
      onClose={onClose}
      footer={
        <>
          <button type="button" className="ghost" onClick={onClose}>
            Cancel
          </button>
          <button className="primary" type="submit" form="hub-token-form" disabled={!value.trim()}>
            Fetch with this token
          </button>
        </>
      }
    >
      <form id="hub-token-form" className="token-form" onSubmit={save}>
        <p className="muted small">{message}</p>
        <p>
          Paste a Hugging Face token of an account that accepted the model's licence. It is used for this download
          only and not stored (set <code>LORASTUDIO_HF_TOKEN</code> on the server to keep one).
        </p>
        <label className="field">
          <span className="field-label">Hub token</span>
          <input type="password" name="hub_token" autoComplete="off" value={value} onChange={(e) => setValue(e.target.value)} />
        </label>
      </form>
    </Dialog>
  );
}
