/** One typed function per API route the UI uses. URLs live here only. */
import { ROUTES } from "./routes.gen";
import { del, get, post, postWithProgress, put, seg } from "./client";
import type {
  CaptionBody,
  DatasetDetail,
  GenerateBody,
  GenerateResult,
  Info,
  Job,
  LoraList,
  PreflightReport,
  RunDetail,
  RunList,
  StopBody,
  TrainConfig,
  TrainStatus,
  UploadResult,
} from "./types";

export const api = {
  info: () => get<Info>("/api/info"),

  dataset: (name: string) => get<DatasetDetail>(`/api/datasets/${seg(name)}`),
  thumbnailUrl: (name: string, file: string, size = 256) =>
    `/api/datasets/${seg(name)}/thumbnails/${seg(file)}?size=${size}`,
  upload: (name: string, files: File[], onProgress: (sent: number, total: number) => void) => {
    const form = new FormData();
    for (const f of files) form.append("files", f, f.name);
    return postWithProgress<UploadResult>(`/api/datasets/${seg(name)}/files`, form, onProgress);
  },
  setCaption: (name: string, file: string, caption: string) =>
    put<unknown>(`/api/datasets/${seg(name)}/captions/${seg(file)}`, { caption } satisfies CaptionBody),
  removeImage: (name: string, file: string) => del<unknown>(`/api/datasets/${seg(name)}/images/${seg(file)}`),

  preflight: (config: Partial<TrainConfig>) => post<PreflightReport>("/api/train/preflight", { config }),
  start: (config: Partial<TrainConfig>, queue = true) => post<Job>("/api/train/start", { config, queue }),
  stop: (body: StopBody) => post<Job>("/api/train/stop", body),
  status: (since?: number) => get<TrainStatus>(`/api/train/status${since != null ? `?since=${since}` : ""}`),
  eventsUrl: "/api/train/events",

  runs: () => get<RunList>("/api/runs"),
  run: (id: string) => get<RunDetail>(`/api/runs/${seg(id)}`),
  deleteRun: (id: string) => del<unknown>(`/api/runs/${seg(id)}`),

  loras: (family?: string) => get<LoraList>(`/api/loras${family ? `?family=${seg(family)}` : ""}`),
  /** Download URL of a LoRA file, or null while the server has no such route. */
  loraFileUrl: (name: string): string | null =>
    ROUTES.has("/api/loras/{name}/file") ? `/api/loras/${seg(name)}/file` : null,
  generate: (body: GenerateBody) => post<GenerateResult>("/api/generate", body),
};
