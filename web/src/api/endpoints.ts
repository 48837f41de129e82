/**
 * One typed function per API route the UI uses. URLs live here only. URLs the browser loads by
 * itself (images, the event stream, downloads) carry the API token as `?token=` (see auth.ts).
 * A GET's last argument `signal` aborts it (lib/latest.ts: an answer for what is no longer shown).
 */
import { withToken } from "./auth";
import { del, get, post, postEffect, postWithProgress, put, seg } from "./client";
import type {
  BulkCaptionBody,
  BulkCaptionResult,
  CaptionBody,
  CaptionJob,
  CaptionOptions,
  CaptionResult,
  CatalogueModel,
  CheckpointList,
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

export const api = {
  info: (signal?: AbortSignal) => get<Info>("/api/info", signal),
  /** The base-model catalogue: models/, added folders and the hub cache, vetted. */
  models: (signal?: AbortSignal) => get<CatalogueModel[]>("/api/models", signal),
  /** Start fetching a hub repo (202); `token`: a hub token for this fetch only (a gated repo). */
  fetchModel: (body: FetchBody) => post<Fetch>("/api/models/fetch", body),
  fetches: (signal?: AbortSignal) => get<FetchList>("/api/models/fetch", signal),
  cancelFetch: (id: string) => post<Fetch>(`/api/models/fetch/${seg(id)}/cancel`, {}),
  /** List an existing folder (absolute path) in the catalogue. */
  addModelFolder: (path: string) => post<CatalogueModel>("/api/models/added", { path }),
  /** Remove an added folder from the catalogue (its files stay). */
  forgetModelFolder: (id: string) => del<unknown>(`/api/models/added/${seg(id)}`),
  /** Delete a model lorastudio downloaded or created. */
  deleteModel: (id: string) => del<unknown>(`/api/models/${seg(id)}`),

  /** One page of a dataset's images (by file name; the totals count them all); no page: all. */
  dataset: (name: string, page?: { offset: number; limit: number }, signal?: AbortSignal) =>
    get<DatasetDetail>(
      `/api/datasets/${seg(name)}${page ? `?${page.offset ? `offset=${page.offset}&` : ""}limit=${page.limit}` : ""}`,
      signal,
    ),
  thumbnailUrl: (name: string, file: string, size = 256) =>
    withToken(`/api/datasets/${seg(name)}/thumbnails/${seg(file)}?size=${size}`),
  /** A thumbnail of a loss mask of the dataset (masks/<file>). */
  maskThumbnailUrl: (name: string, file: string, size = 256) =>
    withToken(`/api/datasets/${seg(name)}/masks/${seg(file)}?size=${size}`),
  /** A thumbnail of an image's alpha channel (grey, opaque = white: its mask with alpha_mask). */
  alphaThumbnailUrl: (name: string, file: string, size = 256) =>
    withToken(`/api/datasets/${seg(name)}/alpha/${seg(file)}?size=${size}`),
  /** `field`: "files" for images and captions, or a control folder ("control", "control_2" ...)
   * whose control images pair with the targets by file name. */
  upload: (name: string, files: File[], onProgress: (sent: number, total: number) => void, field = "files") => {
    const form = new FormData();
    for (const f of files) form.append(field, f, f.name);
    return postWithProgress<UploadResult>(`/api/datasets/${seg(name)}/files`, form, onProgress);
  },
  /** Thumbnail of a control image: `path` as the dataset lists it ("control_2/a.png"). */
  controlThumbnailUrl: (name: string, path: string, size = 128) => {
    const [folder, file] = path.split("/");
    return withToken(`/api/datasets/${seg(name)}/thumbnails/${seg(file ?? "")}?size=${size}&control=${seg(folder)}`);
  },
  /** `expected`: the caption the edit started from ("" for none); another one there now is a 409 with `current`. */
  setCaption: (name: string, file: string, caption: string, expected?: string) =>
    put<CaptionResult>(`/api/datasets/${seg(name)}/captions/${seg(file)}`, { caption, expected } satisfies CaptionBody),
  /** Find / replace, prepend, append over every caption of the dataset (dry_run: count only). */
  bulkCaptions: (name: string, body: BulkCaptionBody, signal?: AbortSignal) =>
    post<BulkCaptionResult>(`/api/datasets/${seg(name)}/captions`, body, signal),
  deleteDataset: (name: string) => del<DatasetDeleted>(`/api/datasets/${seg(name)}`),
  /** Rename a dataset folder (as listed: one made by hand under a name the studio cannot use too) to `to`. */
  renameDataset: (name: string, to: string) =>
    post<DatasetRenamed>(`/api/datasets/${seg(name)}/rename`, { to } satisfies RenameBody),
  removeImage: (name: string, file: string) => del<DeletedFiles>(`/api/datasets/${seg(name)}/images/${seg(file)}`),
  /** Start auto-captioning a dataset with a vision-language model (202: the caption job). */
  captionDataset: (name: string, body: CaptionOptions) => post<CaptionJob>(`/api/datasets/${seg(name)}/caption`, body),
  captionJob: (id: string, signal?: AbortSignal) => get<CaptionJob>(`/api/captions/${seg(id)}`, signal),
  /** The dataset's newest caption job, recorded across server restarts ("interrupted" when the server died while it ran; 404: none). */
  latestCaption: (name: string, signal?: AbortSignal) => get<CaptionJob>(`/api/datasets/${seg(name)}/caption`, signal),
  cancelCaption: (id: string) => post<CaptionJob>(`/api/captions/${seg(id)}/cancel`),

  preflight: (config: Partial<TrainConfig>, signal?: AbortSignal) => post<PreflightReport>("/api/train/preflight", { config }, signal),
  /** `answerSignal` (here and on stop, resumeRun): drops the answer, not the request (client.postEffect). */
  start: (config: Partial<TrainConfig>, queue = true, answerSignal?: AbortSignal) =>
    postEffect<Job>("/api/train/start", { config, queue }, answerSignal),
  stop: (body: StopBody, answerSignal?: AbortSignal) => postEffect<Job>("/api/train/stop", body, answerSignal),
  status: (since?: number, signal?: AbortSignal) => get<TrainStatus>(`/api/train/status${since != null ? `?since=${since}` : ""}`, signal),
  /** The event stream's URL (a function: the token may be set after load). */
  eventsUrl: () => withToken("/api/train/events"),

  runs: (signal?: AbortSignal) => get<RunList>("/api/runs", signal),
  run: (id: string, signal?: AbortSignal) => get<RunDetail>(`/api/runs/${seg(id)}`, signal),
  deleteRun: (id: string) => del<RunDeleted>(`/api/runs/${seg(id)}`),
  /** The sample previews in a run's folder, oldest step first. */
  runSamples: (id: string, signal?: AbortSignal) => get<SampleList>(`/api/runs/${seg(id)}/samples`, signal),
  /** URL of a sample PNG of run `id`; `path` is run-relative ("samples/step-000123-0.png") or a file name. */
  sampleUrl: (id: string, path: string) =>
    withToken(`/api/runs/${seg(id)}/samples/${seg(path.split("/").pop() ?? path)}`),
  /** The checkpoints in a run's folder, oldest first, and the step a resume would start from. */
  runCheckpoints: (id: string, signal?: AbortSignal) => get<CheckpointList>(`/api/runs/${seg(id)}/checkpoints`, signal),
  /** A run's LoRAs by step (snapshots under loras/, then the final file); 404 when it has none. */
  runLoras: (id: string, signal?: AbortSignal) => get<LoraSteps>(`/api/runs/${seg(id)}/loras`, signal),
  /** Download URL of a run's resolved config as a file `lorastudio train` takes. */
  runConfigUrl: (id: string, format: "json" | "toml") => withToken(`/api/runs/${seg(id)}/config?format=${format}`),
  /** The last `lines` lines of a run's worker log (bounded by the server). */
  runLog: (id: string, lines = 500, signal?: AbortSignal) => get<RunLog>(`/api/runs/${seg(id)}/log?lines=${lines}`, signal),
  /** Continue a stopped/failed run from its newest checkpoint (or `body.checkpoint`). */
  resumeRun: (id: string, body: ResumeBody = {}, answerSignal?: AbortSignal) =>
    postEffect<Job>(`/api/runs/${seg(id)}/resume`, body, answerSignal),

  loras: (family?: string, signal?: AbortSignal) => get<LoraList>(`/api/loras${family ? `?family=${seg(family)}` : ""}`, signal),
  /** Download URL of a trained LoRA's .safetensors (served as an attachment); `step`: the raw
   * weights of that step (a snapshot, or an EMA run's <name>.raw.safetensors). */
  loraFileUrl: (name: string, step?: number | null) =>
    withToken(`/api/loras/${seg(name)}/file${step == null ? "" : `?step=${step}`}`),
  /** A run's LoRAs by step: its snapshots (loras/<name>-step-N), then the final file. */
  loraSteps: (name: string, signal?: AbortSignal) => get<LoraSteps>(`/api/loras/${seg(name)}/steps`, signal),
  /** Upload a trained LoRA (with its sidecar, a model card and its newest samples) to a hub repo. */
  pushLora: (name: string, body: PushBody) => post<PushResult>(`/api/loras/${seg(name)}/push`, body),
  generate: (body: GenerateBody) => post<GenerateResult>("/api/generate", body),
  /** Stop the generation sent with this `request_id` (after its current denoising step): its
   * POST answers 409 and nothing is kept. 404 once it ended. */
  cancelGenerate: (requestId: string) => post<GenerateCancel>(`/api/generate/${seg(requestId)}/cancel`),
  /** Upload reference images (slot order) for generation with an edit family; their ids go in GenerateBody.references. */
  uploadReferences: (files: File[]) => {
    const form = new FormData();
    for (const f of files) form.append("files", f, f.name);
    return post<ReferencesResult>("/api/generate/references", form);
  },
  /** A page of the server's gallery, newest first, with each image's settings: the newest page,
   * or the page after the one whose `next_cursor` is `cursor` (the server's default page size). */
  gallery: (signal?: AbortSignal, cursor?: string) =>
    get<GalleryList>(cursor ? `/api/gallery?cursor=${encodeURIComponent(cursor)}` : "/api/gallery", signal),
  /** Delete a gallery image and its settings sidecar (404 when it is gone). */
  deleteGalleryImage: (file: string) => del<GalleryDeleted>(`/api/gallery/${seg(file)}`),
  /** An image URL the server returned (gallery or generate), loadable by <img>. */
  imageUrl: (url: string) => withToken(url),
};
