import { type FormEvent, useState } from "react";
import { useInfo } from "../api/info";
import { DataTable } from "../components/DataTable";
import { nameProblem } from "../lib/nameRule";
import { href, navigate } from "../lib/route";

/** Dataset folders with image/caption counts, and a form to start a new one. */
export function DatasetsScreen() {
  const { info, reload } = useInfo();
  const [name, setName] = useState("");
  const [error, setError] = useState<string | null>(null);
  const datasets = info?.datasets ?? [];

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
        <label className="field">
          <span className="field-label">New dataset</span>
          <input
            placeholder="my-style"
            value={name}
            aria-label="new dataset name"
            onChange={(e) => {
              setName(e.target.value);
              setError(null);
            }}
          />
          {error && (
            <span className="field-error" role="alert">
              {error}
            </span>
          )}
        </label>
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
        <DataTable
          rows={datasets}
          rowKey={(d) => d.name}
          columns={[
            { header: "Name", cell: (d) => <a href={href("datasets", d.name)}>{d.name}</a> },
            { header: "Images", num: true, cell: (d) => d.images },
            {
              header: "Captions",
              num: true,
              cell: (d) => (
                <>
                  {d.captions}
                  {d.captions < d.images && <span className="warn-dot" title="some images have no caption" />}
                </>
              ),
            },
            {
              header: "",
              kind: "actions",
              cell: (d) => (
                <a className="button ghost" href={href("train", d.name)}>
                  Train on it
                </a>
              ),
            },
          ]}
        />
      )}
    </section>
  );
}
