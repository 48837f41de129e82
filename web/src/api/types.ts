/**
 * The UI's API types. Everything the server declares comes from the GENERATED schema.d.ts
 * (scripts/build_web.sh dumps the OpenAPI schema with web/scripts/dump_schema.py and runs
 * openapi-typescript); nothing here re-declares a request body or a declared model.
 *
 * Routes that still answer an undeclared `dict` generate as `{[key: string]: unknown}`. For
 * those, `Declared<Generated, Shape>` picks `Shape` (what the route returns today, see
 * /work/briefs/requests-web.md) and switches to the generated type by itself as soon as the
 * server declares a response model.
 */
import type { components, paths } from "./schema";

type Schemas = components["schemas"];

/** The JSON body of a path's successful answer (200 or 201). */
type Ok<P extends keyof paths, M extends keyof paths[P]> = paths[P][M] extends {
  responses: infer R;
}
  ? R extends { 200: { content: { "application/json": infer J } } }
    ? J
    : R extends { 201: { content: { "application/json": infer J } } }
      ? J
      : never
  : never;

/** The generated type when the server declares one, else the shape the route returns today. */
type Declared<G, Shape> = string extends keyof G ? Shape : G;

// ---- generated models ----------------------------------------------------------------------
export type TrainConfig = Schemas["TrainConfig"];
/** An event model with its `type` tag required (the schema marks it as defaulted). */
type Tagged<T extends { type?: string }> = T & Required<Pick<T, "type">>;
export type ProgressEvent = Tagged<Schemas["ProgressEvent"]>;
export type CompleteEvent = Tagged<Schemas["CompleteEvent"]>;
export type ErrorEvent = Tagged<Schemas["ErrorEvent"]>;
export type PreparingEvent = Tagged<Schemas["PreparingEvent"]>;
export type ModelLoadStartedEvent = Tagged<Schemas["ModelLoadStartedEvent"]>;
export type ModelLoadCompletedEvent = Tagged<Schemas["ModelLoadCompletedEvent"]>;
export type StartBody = Schemas["StartBody"];
export type StopBody = Schemas["StopBody"];
export type CaptionBody = Schemas["CaptionBody"];
export type GenerateBody = Schemas["GenerateBody"];
export type LoraRef = Schemas["LoraRef"];

/** A status change the job service logs between engine events. */
export interface StatusEvent {
  type: "status";
  status: JobStatus;
  error: string | null;
}
/** Every event of GET /api/train/events; the service tags each with its job's id. */
export type TrainEvent = (
  | ModelLoadStartedEvent
  | ModelLoadCompletedEvent
  | PreparingEvent
  | ProgressEvent
  | CompleteEvent
  | ErrorEvent
  | StatusEvent
) & { job_id?: string };

// ---- responses (generated once the routes declare them) -------------------------------------
export type JobStatus =
  | "queued"
  | "preparing"
  | "running"
  | "stopping"
  | "completed"
  | "stopped"
  | "failed"
  | "interrupted";

export interface FamilyShape {
  name: string;
  title: string;
  objective: string;
  latent_channels: number;
  resolution_multiple: number;
  lora_targets: string[];
  defaults: Partial<TrainConfig>;
  supports: string[];
  precisions?: string[];
}
export interface DatasetSummaryShape {
  name: string;
  path?: string;
  images: number;
  captions: number;
}
export interface ModelShape {
  name: string;
  path: string;
  family: string | null;
}
export interface HostShape {
  device: string;
  name: string;
  memory_gb: number | null;
  precisions: string[];
}
export type Info = Declared<
  Ok<"/api/info", "get">,
  {
    version?: string;
    datasets_root: string;
    outputs_root: string;
    models_root?: string;
    datasets: DatasetSummaryShape[];
    families: FamilyShape[];
    host: HostShape;
    models?: ModelShape[];
  }
>;
export type Family = Info["families"][number];
export type DatasetSummary = Info["datasets"][number];

export interface MetricPointShape {
  step: number;
  epoch: number | null;
  loss: number | null;
  avg_loss: number | null;
  lr: number | null;
  grad_norm: number | null;
  samples_per_second: number | null;
  peak_memory_gb: number | null;
}
export interface JobShape {
  id: string;
  status: JobStatus;
  output_name: string;
  family: string;
  created_at: string;
  started_at: string | null;
  finished_at: string | null;
  phase: ModelLoadStartedEvent | ModelLoadCompletedEvent | PreparingEvent | null;
  progress: ProgressEvent | null;
  metrics: MetricPointShape[];
  lora_path: string | null;
  steps_run: number;
  error: string | null;
  stop_requested: { save: boolean } | null;
  config: TrainConfig;
}
export type Job = Declared<Ok<"/api/train/start", "post">, JobShape>;
export type MetricPoint = Job["metrics"][number];
export type TrainStatus = Declared<
  Ok<"/api/train/status", "get">,
  { job: Job | null; queue: { id: string; output_name: string }[]; busy: boolean; event_seq: number }
>;

export interface DroppedFile {
  file: string;
  reason: string;
}
export type PreflightReport = Declared<
  Ok<"/api/train/preflight", "post">,
  {
    config: TrainConfig;
    dataset: {
      path: string;
      images_found: number;
      images_used: number;
      dropped: DroppedFile[];
      missing_captions: string[];
      caption_sources: Record<string, number>;
      unique_captions: number;
      buckets: Record<string, number>;
    };
    schedule: { steps: number; epochs: number; steps_per_epoch: number; batch_size: number; grad_accum: number };
    precision: {
      requested: string;
      base_dtype: string;
      lora_dtype: string;
      device: string;
      tf32: boolean;
      gradient_checkpointing: boolean;
    };
    memory: { estimated_gb: number | null; phases: Record<string, number> | null; note: string };
  }
>;

export interface RunSummaryShape {
  id: string;
  output_name: string;
  family: string;
  status: JobStatus;
  created_at: string;
  started_at: string | null;
  finished_at: string | null;
  steps_run: number;
  total_steps: number | null;
  last_loss: number | null;
  error: string | null;
}
export type RunList = Declared<Ok<"/api/runs", "get">, { runs: RunSummaryShape[] }>;
export type RunSummary = RunList["runs"][number];
export type RunDetail = Declared<
  Ok<"/api/runs/{run_id}", "get">,
  RunSummaryShape & { config: TrainConfig; metrics: MetricPointShape[]; outputs: { kind: string; path: string }[] }
>;

export type DatasetDetail = Declared<
  Ok<"/api/datasets/{name}", "get">,
  DatasetSummaryShape & {
    files: { file: string; caption: string | null; bytes: number; width: number | null; height: number | null }[];
    dropped: DroppedFile[];
  }
>;
export type DatasetImage = DatasetDetail["files"][number];
export type UploadResult = Declared<
  Ok<"/api/datasets/{name}/files", "post">,
  DatasetSummaryShape & { committed: string[] }
>;

export type LoraList = Declared<
  Ok<"/api/loras", "get">,
  {
    root: string;
    loras: {
      name: string;
      family: string | null;
      path: string;
      bytes: number;
      modified: number;
      sidecar: Record<string, unknown> | null;
    }[];
  }
>;
export type Lora = LoraList["loras"][number];
export type GenerateResult = Declared<
  Ok<"/api/generate", "post">,
  {
    file: string;
    url: string;
    path: string;
    seconds: number;
    seed: number;
    width: number;
    height: number;
    loras: { name: string; scale: number }[];
  }
>;
