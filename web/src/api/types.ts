/**
 * The UI's API types: aliases of the GENERATED schema.d.ts (scripts/build_web.sh dumps the
 * server's OpenAPI schema with web/scripts/dump_schema.py and runs openapi-typescript). Nothing
 * here re-declares a shape the server declares; the one hand-written type is the SSE `status`
 * event, which no server model describes (see /work/briefs/requests-web.md).
 */
import type { components } from "./schema";

type Schemas = components["schemas"];

// ---- request bodies -------------------------------------------------------------------------
export type TrainConfig = Schemas["TrainConfig"];
export type StartBody = Schemas["StartBody"];
export type StopBody = Schemas["StopBody"];
export type ResumeBody = Schemas["ResumeBody"];
export type CaptionBody = Schemas["CaptionBody"];
export type GenerateBody = Schemas["GenerateBody"];
export type LoraRef = Schemas["LoraRef"];

// ---- responses ------------------------------------------------------------------------------
export type Info = Schemas["InfoOut"];
export type Family = Schemas["FamilyOut"];
export type Host = Schemas["HostOut"];
export type LocalModel = Schemas["ModelOut"];
export type CatalogueModel = Schemas["CatalogueModelOut"];
export type DatasetSummary = Schemas["DatasetSummary"];
export type DatasetDetail = Schemas["DatasetDetail"];
export type DatasetImage = Schemas["DatasetFile"];
export type DroppedFile = Schemas["DroppedFile"];
export type UploadResult = Schemas["UploadOut"];
export type CaptionResult = Schemas["CaptionOut"];
export type DeletedFiles = Schemas["DeletedFiles"];
export type PreflightReport = Schemas["PreflightOut"];
export type Job = Schemas["JobOut"];
export type JobStatus = Job["status"];
export type MetricPoint = Schemas["MetricPoint"];
export type TrainStatus = Schemas["StatusOut"];
export type RunSummary = Schemas["RunSummary"];
export type RunList = Schemas["RunList"];
export type RunDetail = Schemas["RunDetail"];
export type RunDeleted = Schemas["RunDeleted"];
export type SampleRound = Schemas["SampleRound"];
export type SampleImage = Schemas["SampleImage"];
export type SampleList = Schemas["SampleList"];
export type LoraList = Schemas["LoraList"];
export type Lora = Schemas["LoraOut"];
export type GenerateResult = Schemas["GenerateOut"];
export type GalleryList = Schemas["GalleryList"];
export type GalleryImage = Schemas["GalleryImage"];
export type ErrorBody = Schemas["ErrorOut"];
export type ProblemOut = Schemas["ProblemOut"];

// ---- training events (SSE; generated from lorastudio.training.events) ------------------------
/** An event model with its `type` tag required (the schema marks it as defaulted). */
type Tagged<T extends { type?: string }> = T & Required<Pick<T, "type">>;
export type ProgressEvent = Tagged<Schemas["ProgressEvent"]>;
export type CompleteEvent = Tagged<Schemas["CompleteEvent"]>;
export type ErrorEvent = Tagged<Schemas["ErrorEvent"]>;
export type SampleReadyEvent = Tagged<Schemas["SampleReadyEvent"]>;
export type PreparingEvent = Tagged<Schemas["PreparingEvent"]>;
export type ModelLoadStartedEvent = Tagged<Schemas["ModelLoadStartedEvent"]>;
export type ModelLoadCompletedEvent = Tagged<Schemas["ModelLoadCompletedEvent"]>;
/** What a job's `phase` holds: the last load/preparing event. */
export type PhaseEvent = ModelLoadStartedEvent | ModelLoadCompletedEvent | PreparingEvent;

/** A status change the job service logs between engine events (no server model declares it). */
export interface StatusEvent {
  type: "status";
  status: JobStatus;
  error: string | null;
}
/** Every event of GET /api/train/events; the service tags each with its job's id. */
export type TrainEvent = (PhaseEvent | ProgressEvent | SampleReadyEvent | CompleteEvent | ErrorEvent | StatusEvent) & {
  job_id?: string;
};
