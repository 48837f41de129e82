import { api } from "../api/endpoints";
import { href } from "../lib/route";

/** A run's "repeat it" actions: clone it into the Train form, download its resolved config (JSON or TOML, for `lorastudio train`). */
export function RunFiles({ runId }: { runId: string }) {
  return (
    <>
      <a className="button secondary" href={href("clone", runId)}>
        Clone
      </a>
      <a className="button ghost" href={api.runConfigUrl(runId, "toml")} download aria-label="Config .toml: download the config as TOML">
        Config .toml
      </a>
      <a className="button ghost" href={api.runConfigUrl(runId, "json")} download aria-label="Config .json: download the config as JSON">
        Config .json
      </a>
    </>
  );
}
