import { type FormEvent, useId, useState } from "react";
import { ApiError } from "../api/client";
import { api } from "../api/endpoints";
import { useInfo } from "../api/info";
import type { DatasetSummary, NameRule } from "../api/types";
import { DataTable } from "../components/DataTable";
import { FILTER_FROM, matchesName, NameFilter } from "../components/NameFilter";
import { isAbort, useAction, useUnmountSignal } from "../lib/latest";
import { MARKUP_UNCOUNTED, markupWords } from "../lib/markupWords";
import { nameProblem } from "../lib/nameRule";
import { href, navigate } from "../lib/route";
import { useToggleFocus } from "../lib/toggleFocus";
import { Field } from "../components/Field";

/** Rename a folder the studio cannot use (listed `usable: false`): the new name is checked by the
 * server's rule for a new name first (NFC: an NFD name copied from macOS is offered as it reads). */
function RenameFolder({ dataset, rule, onDone }: { dataset: DatasetSummary; rule?: NameRule; onDone: () => void }) {
  const [open, setOpen] = useState(false);
  const errorId = useId();
  const [to, setTo] = useState("");
  const [error, setError] = useState<string | null>(null);
  const mounted = useUnmountSignal(); // whom its actions' answers are for (client.AnswerTo)
  const [busy, setBusy] = useState(false);
  // the focus to the new name's field; Escape closes it (it has no Cancel), back to Rename
  const toggled = useToggleFocus(open, busy ? undefined : () => setOpen(false));
  if (!open) {
    return (
      <button
        ref={toggled}
        type="button"
        className="secondary"
        aria-label={`Rename: ${dataset.name}`}
        onClick={() => {
          setTo(dataset.name.normalize("NFC"));
          setOpen(true);
        }}
      >
        Rename
      </button>
    );
  }
  const submit = async (e: FormEvent) => {
    e.preventDefault();
    const n = to.trim().normalize("NFC");
    const problem = rule ? nameProblem(rule, n) : null;
    if (problem) {
      setError(problem);
      return;
    }
    setBusy(true);
    try {
      await api.renameDataset(dataset.name, n, mounted());
      setOpen(false);
      onDone();
    } catch (err) {
      if (isAbort(err)) return;
      setError(err instanceof Error ? err.message : String(err));
    } finally {
      setBusy(false);
    }
  };
  return (
    <form ref={toggled} className="inline-form" onSubmit={(e) => void submit(e)}>
      <input
        aria-label={`new name for ${dataset.name}`}
        value={to}
        aria-invalid={error ? true : undefined}
        aria-describedby={error ? errorId : undefined} // the refusal read with the field (RELIABILITY 1918)
        onChange={(e) => {
          setTo(e.target.value);
          setError(null);
        }}
      />
      <button type="submit" className="primary" disabled={busy}>
        Rename
      </button>
      {error && (
        <span className="field-error" role="alert" id={errorId}>
          {error}
        </span>
      )}
    </form>
  );
}

/** Delete a folder the studio cannot use, with every file in it, after the user confirms (by its
 * listed name, as the API and `lorastudio datasets delete` do). A 404 is what was asked (gone
 * meanwhile); any other refusal (busy: a run or a caption job holds it) is shown beside it. */
function DeleteFolder({ dataset, onDone }: { dataset: DatasetSummary; onDone: () => void }) {
  const [error, setError] = useState<string | null>(null);
  const errorId = `${useId()}-error`; // the refusal is the Delete button's description (RELIABILITY 2060)
  const mounted = useUnmountSignal(); // whom its actions' answers are for (client.AnswerTo)
  const onDelete = useAction(async () => {
    if (!window.confirm(`Delete the folder ${dataset.name} and every file in it?`)) return;
    try {
      await api.deleteDataset(dataset.name, mounted());
    } catch (err) {
      if (isAbort(err)) return;
      if (!(err instanceof ApiError && err.status === 404)) {
        setError(err instanceof Error ? err.message : String(err));
        return;
      }
    }
    setError(null);
    onDone();
  });
  return (
    <>
      <button type="button" className="danger" aria-label={`delete ${dataset.name}`}
        disabled={onDelete.pending}
        aria-describedby={error ? errorId : undefined}
        onClick={() => void onDelete.run()}
      >
        Delete
      </button>
      {error && (
        <span className="field-error" role="alert" id={errorId}>
          {error}
        </span>
      )}
    </>
  );
}

/** Dataset folders with image/caption counts, and a form to start a new one. A folder made by
 * hand under a name the studio cannot use is greyed with the reason, a Rename and a Delete action. */
export function DatasetsScreen() {
  const { info, reload } = useInfo();
  const [name, setName] = useState("");
  const [error, setError] = useState<string | null>(null);
  const datasets = info?.datasets ?? [];
  const [query, setQuery] = useState(""); // a long list narrowed by name
  const shown = query ? datasets.filter((d) => matchesName(d.name, query)) : datasets;

  const create = (e: FormEvent) => {
    e.preventDefault();
    const n = name.trim().normalize("NFC");
    // the server's rule for a new name (data/paths.new_name), as /api/info serves it
    const problem = info ? nameProblem(info.dataset_name_rule, n) : null;
    if (problem) {
      setError(problem);
      return;
    }
    if (datasets.some((d) => d.name === n)) {
      setError(`A dataset named ${n} already exists.`);
      return;
    }
    navigate("datasets", n);
  };

  return (
    <section className="screen">
      <div className="screen-head">
        <h1>Datasets</h1>
        <button className="ghost" onClick={() => void reload()}>
          Refresh
        </button>
      </div>
      <p className="muted small">Folder: {info?.datasets_root ?? "…"}</p>
      <form className="inline-form card" onSubmit={create}>
        {/* a Field: a refused name is the input's description and makes it invalid (RELIABILITY 1918) */}
        <Field label="New dataset" error={error ?? undefined}>
          <input
            placeholder="my-style"
            value={name}
            aria-label="new dataset name"
            onChange={(e) => {
              setName(e.target.value);
              setError(null);
            }}
          />
        </Field>
        <button type="submit" className="primary">
          Create
        </button>
      </form>
      {datasets.length === 0 ? (
        <div className="empty card">
          <strong>No datasets yet</strong>
          <p>Name one above, then drop its images with their .txt captions (cat.png + cat.txt).</p>
        </div>
      ) : (
        <>
          {(datasets.length >= FILTER_FROM || query) && <NameFilter value={query} onChange={setQuery} what="datasets" />}
          {query && (
            <p className="muted small wrap-anywhere" data-testid="datasets-count" role="status">
              {shown.length ? `${shown.length} of ${datasets.length} datasets` : `No dataset's name holds “${query}”.`}
            </p>
          )}
          <DataTable
            rows={shown}
            rowKey={(d) => d.name}
            rowClass={(d) => (d.usable ? undefined : "unusable")}
            columns={[
              {
                header: "Name",
                cell: (d) =>
                  d.usable ? (
                    <a href={href("datasets", d.name)}>{d.name}</a>
                  ) : (
                    <>
                      <span>{d.name}</span>
                      <div className="small" role="note">
                        Unusable: {d.problem}
                      </div>
                    </>
                  ),
              },
              { header: "Images", num: true, cell: (d) => d.images },
              {
                header: "Captions",
                num: true,
                cell: (d) => (
                  <>
                    {d.captions}
                    {d.captions < d.images && (
                      // a dot to the eye, words to a screen reader (its title alone is read by none; RELIABILITY 1912)
                      <span className="warn-dot" role="img" aria-label={`${d.images - d.captions} images have no caption`} title="some images have no caption" />
                    )}
                    {d.markup_captions > 0 && (
                      <div className="small warn-text" role="note" data-testid="markup-captions">
                        {markupWords(d.markup_captions)}
                      </div>
                    )}
                    {!d.markup_counted && (
                      <div className="small warn-text" role="note" data-testid="markup-uncounted">
                        {MARKUP_UNCOUNTED}
                      </div>
                    )}
                  </>
                ),
              },
              {
                header: "",
                kind: "actions",
                cell: (d) =>
                  d.usable ? (
                    <a className="button ghost" href={href("train", d.name)} aria-label={`Train on it: ${d.name}`}>
                      Train on it
                    </a>
                  ) : (
                    <>
                      <RenameFolder dataset={d} rule={info?.dataset_name_rule} onDone={() => void reload()} />
                      <DeleteFolder dataset={d} onDone={() => void reload()} />
                    </>
                  ),
              },
            ]}
          />
        </>
      )}
    </section>
  );
}
