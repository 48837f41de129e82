import { type FormEvent, useState } from "react";
import { setToken, useAuth } from "../api/auth";
import { Dialog } from "./Dialog";
import { Field } from "./Field";

/**
 * Asks for the API token when the server answered 401 (shown by the app shell while
 * `useAuth().needed`). Saving stores it in this browser; every request then carries it.
 */
export function TokenDialog() {
  const { needed, refused } = useAuth();
  const [value, setValue] = useState("");
  if (!needed) return null;
  const save = (e?: FormEvent) => {
    e?.preventDefault();
    if (value.trim()) {
      setToken(value);
      setValue("");
    }
  };
  return (
    <Dialog
      title="API token required"
      // Without a token nothing loads: Escape and the backdrop keep the dialog open.
      onClose={() => undefined}
      footer={
        <button className="primary" type="submit" form="token-form" disabled={!value.trim()}>
          Save token
        </button>
      }
    >
      <form id="token-form" className="token-form" onSubmit={save}>
        <p>
          This studio is protected by an API token (<code>LORASTUDIO_API_TOKEN</code> on the server). It is kept in
          this browser, so you are asked only once.
        </p>
        {/* a Field: the refusal is the input's description and makes it invalid, not only an alert beside it (RELIABILITY 1918) */}
        <Field label="API token" error={refused ? "The server refused the saved token. Enter the current one." : undefined}>
          <input
            type="password"
            name="api_token"
            autoComplete="current-password"
            value={value}
            onChange={(e) => setValue(e.target.value)}
          />
        </Field>
      </form>
    </Dialog>
  );
}
