/**
 * One typed function per API route the UI uses. URLs live here only. URLs the browser loads by
 * itself (images, the event stream, downloads) never carry the API token: the browser session's
 * cookie stands for it (auth.ts, browserUrl).
 * A GET's last argument `signal` aborts it (lib/latest.ts: an answer for what is no longer shown);
 * a request with an effect takes `answerTo` instead, never optional (client.AnswerTo: its answer is
 * dropped once the screen that sent it is gone, the request itself stands).
 */
import { browserUrl } from "./auth";
import { refuseIfStale } from "./build";
import { type AnswerTo, delEffect, get, post, postEffect, postWithProgress, putEffect, fileSegs, seg } from "./client";
import type {
  BulkCaptionBody,
  BulkCaptionResult,
  CaptionBody,
  CaptionJob,
  CaptionOptions,
  CaptionResult,
  CatalogueModel,
  CheckpointList,
  ConfigImport,
  ConfigImportBody,
  DatasetDeleted,
  DatasetDetail,
  DatasetRenamed,
  DeletedFiles,
  Fetch,
  FetchBody,
  FetchList,
  GalleryDeleted,
  GalleryList,
  GenerateBody,
  GenerateCancel,
  GenerateResult,
  GenerationStatus,
  Info,
  Job,
  LoraList,
  LoraSteps,
  PreflightReport,
  PushBody,
  PushResult,
  ReferencesResult,
  RenameBody,
  ResumeBody,
  RunDeleted,
  RunDetail,
  RunList,
  RunLog,
  SampleList,
  StopBody,
  TrainConfig,
  TrainStatus,
  UploadResult,
} from "./types";

/** A request that starts something with this page's settings: refused here (StalePageError, nothing
 * sent) once the server said it runs another build (api/build.ts, RELIABILITY 2061). */
function unlessStale<T>(send: () => Promise<T>): Promise<T> {
  try {
    refuseIfStale();
  } catch (err) {
    return Promise.reject(err);
  }
  return send();
}

export const api = {
  info: (signal?: AbortSignal) => get<Info>("/api/info", signal),
  /** The base-model catalogue: models/, added folders and the hub cache, vetted. */
  models: (signal?: AbortSignal) => get<CatalogueModel[]>("/api/models", signal),
  /** Start fetching a hub repo (202); `token`: a hub token for this fetch only (a gated repo). */
  fetchModel: (body: FetchBody, answerTo: AnswerTo) => postEffect<Fetch>("/api/models/fetch", body, answerTo),
  fetches: (signal?: AbortSignal) => get<FetchList>("/api/models/fetch", signal),
  cancelFetch: (id: string, answerTo: AnswerTo) => postEffect<Fetch>(`/api/models/fetch/${seg(id)}/cancel`, {}, answerTo),
  /** List an existing folder (absolute path) in the catalogue. */
  addModelFolder: (path: string, answerTo: AnswerTo) => postEffect<CatalogueModel>("/api/models/added", { path }, answerTo),
  /** Remove an added folder from the catalogue (its files stay). */
  forgetModelFolder: (id: string, answerTo: AnswerTo) => delEffect<unknown>(`/api/models/added/${seg(id)}`, answerTo),
  /** Delete a model lorastudio downloaded or created. */
  deleteModel: (id: string, answerTo: AnswerTo) => delEffect<unknown>(`/api/models/${seg(id)}`, answerTo),

  /** One page of a dataset's images (by file name; the totals count them all); no page: all. */
  dataset: (name: string, page?: { offset: number; limit: number }, signal?: AbortSignal) =>
    get<DatasetDetail>(
      `/api/datasets/${seg(name)}${page ? `?${page.offset ? `offset=${page.offset}&` : ""}limit=${page.limit}` : ""}`,
      signal,
    ),
  thumbnailUrl: (name: string, file: string, size = 256) =>
    browserUrl(`/api/datasets/${seg(name)}/thumbnails/${fileSegs(file)}?size=${size}`),
  /** A thumbnail of a loss mask of the dataset (masks/<file>). */
  maskThumbnailUrl: (name: string, file: string, size = 256) =>
    browserUrl(`/api/datasets/${seg(name)}/masks/${seg(file)}?size=${size}`),
  /** A thumbnail of an image's alpha channel (grey, opaque = white: its mask with alpha_mask). */
  alphaThumbnailUrl: (name: string, file: string, size = 256) =>
    browserUrl(`/api/datasets/${seg(name)}/alpha/${fileSegs(file)}?size=${size}`),
  /** `field`: "files" for images and captions, or a control folder ("control", "control_2" ...)
   * whose control images pair with the targets by file name. */
  upload: (name: string, files: File[], onProgress: (sent: number, total: number) => void, field: string, answerTo: AnswerTo) => {
    const form = new FormData();
    for (const f of files) form.append(field, f, f.name);
    // summary=false: the page reloads the dataset once the last batch is in, so each batch's answer
    // need not list the whole dataset (RELIABILITY 2190: work linear in the dataset, per batch)
    return postWithProgress<UploadResult>(`/api/datasets/${seg(name)}/files?summary=false`, form, onProgress, answerTo);
  },
  /** Thumbnail of a control image: `path` as the dataset lists it ("control_2/a.png"). */
  controlThumbnailUrl: (name: string, path: string, size = 128) => {
    const [folder, file] = path.split("/");
    return browserUrl(`/api/datasets/${seg(name)}/thumbnails/${seg(file ?? "")}?size=${size}&control=${seg(folder)}`);
  },
  /** `expected`: the caption the edit started from ("" for none); another one there now is a 409 with `current`. */
  setCaption: (name: string, file: string, caption: string, expected: string | undefined, answerTo: AnswerTo) =>
    putEffect<CaptionResult>(`/api/datasets/${seg(name)}/captions/${fileSegs(file)}`, { caption, expected } satisfies CaptionBody, answerTo),
  /** Find / replace, prepend, append over every caption of the dataset, a dry run (the count only):
   * `signal` aborts it (a newer preview, an edit). */
  previewBulkCaptions: (name: string, body: BulkCaptionBody, signal: AbortSignal) =>
    post<BulkCaptionResult>(`/api/datasets/${seg(name)}/captions`, { ...body, dry_run: true }, signal),
  /** The same edit, written. */
  bulkCaptions: (name: string, body: BulkCaptionBody, answerTo: AnswerTo) =>
    postEffect<BulkCaptionResult>(`/api/datasets/${seg(name)}/captions`, { ...body, dry_run: false }, answerTo),
  deleteDataset: (name: string, answerTo: AnswerTo) => delEffect<DatasetDeleted>(`/api/datasets/${seg(name)}`, answerTo),
  /** Rename a dataset folder (as listed: one made by hand under a name the studio cannot use too) to `to`. */
  renameDataset: (name: string, to: string, answerTo: AnswerTo) =>
    postEffect<DatasetRenamed>(`/api/datasets/${seg(name)}/rename`, { to } satisfies RenameBody, answerTo),
  removeImage: (name: string, file: string, answerTo: AnswerTo) =>
    delEffect<DeletedFiles>(`/api/datasets/${seg(name)}/images/${fileSegs(file)}`, answerTo),
  /** Start auto-captioning a dataset with a vision-language model (202: the caption job). */
  captionDataset: (name: string, body: CaptionOptions, answerTo: AnswerTo) =>
    postEffect<CaptionJob>(`/api/datasets/${seg(name)}/caption`, body, answerTo),
  captionJob: (id: string, signal?: AbortSignal) => get<CaptionJob>(`/api/captions/${seg(id)}`, signal),
  /** The dataset's newest caption job, recorded across server restarts ("interrupted" when the server died while it ran; 404: none). */
  latestCaption: (name: string, signal?: AbortSignal) => get<CaptionJob>(`/api/datasets/${seg(name)}/caption`, signal),
  cancelCaption: (id: string, answerTo: AnswerTo) => postEffect<CaptionJob>(`/api/captions/${seg(id)}/cancel`, undefined, answerTo),

  preflight: (config: Partial<TrainConfig>, signal?: AbortSignal) => post<PreflightReport>("/api/train/preflight", { config }, signal),
  /** Another trainer's config file (its name and text) as Train settings, with the report of every one of its settings (reads and writes nothing on the server). */
  importConfig: (body: ConfigImportBody, signal?: AbortSignal) => post<ConfigImport>("/api/config/import", body, signal),
  /** `answerTo` (here and on every request with an effect): whom the answer is for; its abort
   * drops the answer, not the request (client.AnswerTo). */
  start: (config: Partial<TrainConfig>, answerTo: AnswerTo, queue = true) =>
    unlessStale(() => postEffect<Job>("/api/train/start", { config, queue }, answerTo)),
  stop: (body: StopBody, answerTo: AnswerTo) => postEffect<Job>("/api/train/stop", body, answerTo),
  status: (since?: number, signal?: AbortSignal) => get<TrainStatus>(`/api/train/status${since != null ? `?since=${since}` : ""}`, signal),
  /** The event stream's URL (a function: the token may be set after load). */
  eventsUrl: () => browserUrl("/api/train/events"),

  /** A page of the runs, newest first: the newest `limit`, or those after a page's `cursor` (its
   * next_cursor); `q` keeps the runs whose name, id or base model holds each of its words (any case). */
  runs: (signal?: AbortSignal, page: { limit?: number; cursor?: string; q?: string } = {}) => {
    const query = new URLSearchParams();
    if (page.limit != null) query.set("limit", String(page.limit));
    if (page.cursor) query.set("cursor", page.cursor);
    if (page.q) query.set("q", page.q);
    const q = query.toString();
    return get<RunList>(q ? `/api/runs?${q}` : "/api/runs", signal);
  },
  run: (id: string, signal?: AbortSignal) => get<RunDetail>(`/api/runs/${seg(id)}`, signal),
  deleteRun: (id: string, answerTo: AnswerTo) => delEffect<RunDeleted>(`/api/runs/${seg(id)}`, answerTo),
  /** A page of the sample previews in a run's folder: the newest `limit` rounds (the server's default:
   * 100), or the older ones after a page's `cursor` (its next_cursor), or the round of `step` only;
   * listed oldest step first. */
  runSamples: (id: string, signal?: AbortSignal, page: { limit?: number; cursor?: string; step?: number } = {}) => {
    const query = new URLSearchParams();
    if (page.limit != null) query.set("limit", String(page.limit));
    if (page.cursor) query.set("cursor", page.cursor);
    if (page.step != null) query.set("step", String(page.step));
    const q = query.toString();
    return get<SampleList>(q ? `/api/runs/${seg(id)}/samples?${q}` : `/api/runs/${seg(id)}/samples`, signal);
  },
  /** URL of a sample PNG of run `id`; `path` is run-relative ("samples/step-000123-0.png") or a file name. */
  sampleUrl: (id: string, path: string) =>
    browserUrl(`/api/runs/${seg(id)}/samples/${seg(path.split("/").pop() ?? path)}`),
  /** The checkpoints in a run's folder, oldest first, and the step a resume would start from. */
  runCheckpoints: (id: string, signal?: AbortSignal) => get<CheckpointList>(`/api/runs/${seg(id)}/checkpoints`, signal),
  /** A run's LoRAs by step (snapshots under loras/, then the final file); 404 when it has none. */
  runLoras: (id: string, signal?: AbortSignal) => get<LoraSteps>(`/api/runs/${seg(id)}/loras`, signal),
  /** Download URL of a run's resolved config as a file `lorastudio train` takes. */
  runConfigUrl: (id: string, format: "json" | "toml") => browserUrl(`/api/runs/${seg(id)}/config?format=${format}`),
  /** The last `lines` lines of a run's worker log (bounded by the server). */
  runLog: (id: string, lines = 500, signal?: AbortSignal) => get<RunLog>(`/api/runs/${seg(id)}/log?lines=${lines}`, signal),
  /** Continue a stopped/failed run from its newest checkpoint (or `body.checkpoint`). */
  resumeRun: (id: string, body: ResumeBody, answerTo: AnswerTo) =>
    unlessStale(() => postEffect<Job>(`/api/runs/${seg(id)}/resume`, body, answerTo)),

  /** A page of the trained LoRAs (newest first, a family's when given): `q` keeps the names that
   * hold it (any case), `names` these names only, `cursor` a page's next_cursor (the page after it). */
  loras: (family?: string, signal?: AbortSignal, page: { q?: string; names?: readonly string[]; cursor?: string } = {}) => {
    const query = new URLSearchParams();
    if (family) query.set("family", family);
    if (page.q) query.set("q", page.q);
    for (const name of page.names ?? []) query.append("name", name);
    if (page.cursor) query.set("cursor", page.cursor);
    const q = query.toString();
    return get<LoraList>(q ? `/api/loras?${q}` : "/api/loras", signal);
  },
  /** Download URL of a trained LoRA's .safetensors (served as an attachment); `step`: the raw
   * weights of that step (a snapshot, or an EMA run's <name>.raw.safetensors). */
  loraFileUrl: (name: string, step?: number | null) =>
    browserUrl(`/api/loras/${seg(name)}/file${step == null ? "" : `?step=${step}`}`),
  /** Download URL of a trained LoRA's sidecar JSON (<name>.json: resolved config, dataset fingerprint,
   * loader checks), served as an attachment. */
  loraSidecarUrl: (name: string) => browserUrl(`/api/loras/${seg(name)}/sidecar`),
  /** A run's LoRAs by step: its snapshots (loras/<name>-step-N), then the final file. */
  loraSteps: (name: string, signal?: AbortSignal) => get<LoraSteps>(`/api/loras/${seg(name)}/steps`, signal),
  /** Upload a trained LoRA (with its sidecar, a model card and its newest samples) to a hub repo. */
  pushLora: (name: string, body: PushBody, answerTo: AnswerTo) => postEffect<PushResult>(`/api/loras/${seg(name)}/push`, body, answerTo),
  /** The synchronous form: answers with the image once it is made (a proxy may cut it: the UI uses startGeneration). */
  generate: (body: GenerateBody, answerTo: AnswerTo) => unlessStale(() => postEffect<GenerateResult>("/api/generate", body, answerTo)),
  /** Send a generation (the asynchronous form): 202 at once with its status; `generation` follows it. */
  startGeneration: (body: GenerateBody, answerTo: AnswerTo) =>
    unlessStale(() => postEffect<GenerationStatus>("/api/generations", body, answerTo)),
  /** A generation sent with startGeneration: its phase, its step of steps, then its image or its error. */
  generation: (requestId: string, signal?: AbortSignal) => get<GenerationStatus>(`/api/generations/${seg(requestId)}`, signal),
  /** Stop the generation sent with this `request_id` (after its current denoising step): its
   * state becomes cancelled and nothing is kept. 404 once it ended. */
  cancelGenerate: (requestId: string, answerTo: AnswerTo) =>
    postEffect<GenerateCancel>(`/api/generations/${seg(requestId)}/cancel`, undefined, answerTo),
  /** Upload reference images (slot order) for generation with an edit family; their ids go in GenerateBody.references. */
  uploadReferences: (files: File[], answerTo: AnswerTo) => {
    const form = new FormData();
    for (const f of files) form.append("files", f, f.name);
    return postEffect<ReferencesResult>("/api/generate/references", form, answerTo);
  },
  /** A page of the server's gallery, newest first, with each image's settings: the newest page,
   * or the page after the one whose `next_cursor` is `cursor` (the server's default page size). */
  gallery: (signal?: AbortSignal, cursor?: string) =>
    get<GalleryList>(cursor ? `/api/gallery?cursor=${encodeURIComponent(cursor)}` : "/api/gallery", signal),
  /** Delete a gallery image and its settings sidecar (404 when it is gone). */
  deleteGalleryImage: (file: string, answerTo: AnswerTo) => delEffect<GalleryDeleted>(`/api/gallery/${seg(file)}`, answerTo),
  /** An image URL the server returned (gallery or generate), loadable by <img>. */
  imageUrl: (url: string) => browserUrl(url),
};
