interface Props {
  /** The picked LoRAs whose file changed since the reused image was made ("name", "name (raw, step N)"). */
  changed: readonly string[];
  busy: boolean;
  /** Generate again with the files as they are now (the picks without their sha256). */
  onUseCurrent: () => void;
}

/** The server refused a reused image's LoRA file as changed since (400 `loras.N.sha256`): said
 * as such, and the user may generate with the current file; nothing when none changed. */
export function LoraChanged({ changed, busy, onUseCurrent }: Props) {
  if (!changed.length) return null;
  const one = changed.length === 1;
  return (
    <div className="banner error" role="alert" data-testid="lora-changed">
      <p>
        {one ? "The LoRA file of " : "The LoRA files of "}
        {changed.join(", ")} changed since this image was made (its run was retrained or the file replaced): these settings
        would now render another image. Nothing was generated.
      </p>
      <button type="button" className="secondary small" disabled={busy} onClick={onUseCurrent}>
        Generate with the current {one ? "file" : "files"}
      </button>
    </div>
  );
}

/** The reused image's base model changed since it was made (the server's 400 `base_identity`): said
 * on its own, with the choice of the base as it is now (nothing is retried on its own). */
export function BaseChanged({ baseModel, busy, onUseCurrent }: { baseModel: string | null; busy: boolean; onUseCurrent: () => void }) {
  if (!baseModel) return null;
  return (
    <div className="banner error" role="alert" data-testid="base-changed">
      <p>
        The base model {baseModel} changed since this image was made (it was replaced or fetched again): these settings would
        now render another image. Nothing was generated.
      </p>
      <button type="button" className="secondary small" disabled={busy} onClick={onUseCurrent}>
        Generate with the current base
      </button>
    </div>
  );
}
