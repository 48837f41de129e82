/**
 * The UI's API types: aliases of the GENERATED schema.d.ts (scripts/build_web.sh dumps the
 * server's OpenAPI schema with web/scripts/dump_schema.py and runs openapi-typescript). Nothing
 * here re-declares a shape the server declares.
 */
import type { components } from "./schema";

type Schemas = components["schemas"];

// ---- request bodies -------------------------------------------------------------------------
export type TrainConfig = Schemas["TrainConfig"];
/** A resolved config as the server returns it (every field present; null = off / not used). */
export type ResolvedConfig = Schemas["TrainConfigOut"];
export type StartBody = Schemas["StartBody"];
export type StopBody = Schemas["StopBody"];
export type ResumeBody = Schemas["ResumeBody"];
export type CaptionBody = Schemas["CaptionBody"];
export type BulkCaptionBody = Schemas["BulkCaptionBody"];
export type BulkCaptionResult = Schemas["BulkCaptionOut"];
/** POST /api/datasets/{name}/caption: the auto-captioning settings. */
export type CaptionOptions = Schemas["CaptionOptions"];
export type GenerateBody = Schemas["GenerateBody"];
export type LoraRef = Schemas["LoraRef"];
export type PushBody = Schemas["PushBody"];
export type ConfigImportBody = Schemas["ConfigImportBody"];
export type ConfigImport = Schemas["ConfigImportOut"];
export type ImportLine = Schemas["ImportLineOut"];

// ---- responses ------------------------------------------------------------------------------
export type Info = Schemas["InfoOut"];
export type Family = Schemas["FamilyOut"];
export type Host = Schemas["HostOut"];
export type ConfigRules = Schemas["ConfigRulesOut"];
export type NameRule = Schemas["NameRuleOut"];
export type LocalModel = Schemas["ModelOut"];
export type CatalogueModel = Schemas["CatalogueModelOut"];
export type Fetch = Schemas["FetchOut"];
export type FetchList = Schemas["FetchList"];
export type FetchBody = Schemas["FetchBody"];
export type DatasetSummary = Schemas["DatasetSummary"];
export type DatasetDetail = Schemas["DatasetDetail"];
export type DatasetImage = Schemas["DatasetFile"];
export type DroppedFile = Schemas["DroppedFile"];
export type UploadResult = Schemas["UploadBrief"];
export type DatasetDeleted = Schemas["DatasetDeleted"];
export type DatasetRenamed = Schemas["DatasetRenamed"];
export type RenameBody = Schemas["RenameBody"];
export type CaptionResult = Schemas["CaptionOut"];
export type CaptionJob = Schemas["CaptionJobOut"];
export type DeletedFiles = Schemas["DeletedFiles"];
export type PreflightReport = Schemas["PreflightOut"];
/** The preflight's memory plan: each plan setting's value and where it comes from. */
export type PreflightPlan = Schemas["PreflightPlan"];
export type PlanField = Schemas["PlanFieldOut"];
/** The plan a run uses (its plan_chosen event, kept in the job and the run record). */
export type Plan = Schemas["PlanOut"];
export type PlanTrial = Schemas["PlanTrialOut"];
export type Job = Schemas["JobOut"];
export type JobStatus = Job["status"];
export type MetricPoint = Schemas["MetricPoint"];
/** One validation round of a run: the held-out loss after `step`. */
export type ValidationPoint = Schemas["ValidationPoint"];
export type TrainStatus = Schemas["StatusOut"];
export type RunSummary = Schemas["RunSummary"];
export type RunList = Schemas["RunList"];
export type RunDetail = Schemas["RunDetail"];
export type RunDeleted = Schemas["RunDeleted"];
export type RunLog = Schemas["RunLog"];
export type CheckpointList = Schemas["CheckpointList"];
export type Checkpoint = Schemas["CheckpointOut"];
export type SampleRound = Schemas["SampleRound"];
export type SampleImage = Schemas["SampleImage"];
export type SampleList = Schemas["SampleList"];
export type LoraList = Schemas["LoraList"];
export type LoraSteps = Schemas["LoraSteps"];
export type Lora = Schemas["LoraOut"];
export type PushResult = Schemas["PushOut"];
export type GenerateResult = Schemas["GenerateOut"];
export type GenerateCancel = Schemas["GenerateCancelOut"];
/** A generation sent to the asynchronous form (POST /api/generations), as GET /api/generations/{id} tells it. */
export type GenerationStatus = Schemas["GenerationStatusOut"];
export type GalleryList = Schemas["GalleryList"];
export type GalleryDeleted = Schemas["GalleryDeleted"];
export type GalleryImage = Schemas["GalleryImage"];
export type ReferencesResult = Schemas["ReferencesOut"];
export type UploadedReference = Schemas["ReferenceOut"];
export type ErrorBody = Schemas["ErrorOut"];
export type ProblemOut = Schemas["ProblemOut"];

// ---- training events (SSE; generated from lorastudio.training.events and api.schemas) ----------
/** An event model with its `type` tag required (the schema marks it as defaulted). */
type Tagged<T extends { type?: string }> = T & Required<Pick<T, "type">>;
export type ProgressEvent = Tagged<Schemas["ProgressEvent"]>;
export type CompleteEvent = Tagged<Schemas["CompleteEvent"]>;
export type ErrorEvent = Tagged<Schemas["ErrorEvent"]>;
export type SampleReadyEvent = Tagged<Schemas["SampleReadyEvent"]>;
export type PlanChosenEvent = Tagged<Schemas["PlanChosenEvent"]>;
export type ValidationEvent = Tagged<Schemas["ValidationEvent"]>;
/** What a job's `phase` holds: the last load/preparing event (a tagged union). */
export type PhaseEvent = NonNullable<Job["phase"]>;
export type PreparingEvent = Extract<PhaseEvent, { type: "preparing" }>;
export type ModelLoadStartedEvent = Extract<PhaseEvent, { type: "model_load_started" }>;
export type ModelLoadCompletedEvent = Extract<PhaseEvent, { type: "model_load_completed" }>;
/** A status change the job service logs between engine events. */
export type StatusEvent = Schemas["StatusEvent"];
/** Every event of GET /api/train/events; the service tags each with its job's id. */
export type TrainEvent = (
  | PhaseEvent
  | ProgressEvent
  | SampleReadyEvent
  | PlanChosenEvent
  | ValidationEvent
  | CompleteEvent
  | ErrorEvent
  | StatusEvent
) & {
  job_id?: string;
};
