import { useEffect, useRef } from "react";
import { ensureSession, installImageRetry, RENEW_EVERY_MS, renewSession, useAuth } from "./api/auth";
import { InfoProvider, useInfo } from "./api/info";
import { TrainingProvider, useTraining } from "./api/training";
import { TokenDialog } from "./components/TokenDialog";
import { href, useRoute } from "./lib/route";
import { DatasetDetailScreen } from "./screens/DatasetDetailScreen";
import { DatasetsScreen } from "./screens/DatasetsScreen";
import { GenerateScreen } from "./screens/GenerateScreen";
import { LiveScreen } from "./screens/LiveScreen";
import { ModelsScreen } from "./screens/ModelsScreen";
import { RunDetailScreen } from "./screens/RunDetailScreen";
import { RunsScreen } from "./screens/RunsScreen";
import { TrainScreen } from "./screens/TrainScreen";
import { ErrorBanner } from "./components/ErrorBanner";
import { UpdatedBanner } from "./components/UpdatedBanner";
import { LiveStatus } from "./components/LiveStatus";
import { SkipLink, useScreenChange } from "./components/ScreenChange";
import { keepFocus } from "./lib/focusKept";

const NAV = [
  ["datasets", "Datasets"],
  ["train", "Train"],
  ["live", "Live"],
  ["runs", "Runs"],
  ["generate", "Generate"],
  ["models", "Models"],
] as const;

function LiveBadge() {
  const { job } = useTraining();
  if (!job || !["queued", "preparing", "running", "stopping"].includes(job.status)) return null;
  const p = job.progress;
  return (
    <a className="live-badge" href={href("live")} title="the running job" aria-label={p ? `training: step ${p.step} of ${p.total_steps}` : `training: ${job.status}`}>
      <span className="pulse" aria-hidden="true" />
      {p ? `${p.step}/${p.total_steps}` : job.status}
    </a>
  );
}

function Screen({ route }: { route: string[] }) {
  const [top, arg] = route;
  switch (top) {
    case "datasets":
      return arg ? <DatasetDetailScreen name={arg} /> : <DatasetsScreen />;
    case "live":
      return <LiveScreen />;
    case "runs":
      return arg ? <RunDetailScreen id={arg} /> : <RunsScreen />;
    case "generate":
      return <GenerateScreen fromRun={arg} />;
    case "again": // "Generate again" of a sample preview: #/again/<run>/<step>/<prompt index>
      return <GenerateScreen fromSample={{ runId: arg ?? "", step: Number(route[2]), index: Number(route[3]) }} />;
    case "models":
      return <ModelsScreen />;
    case "clone":
      return <TrainScreen cloneOf={arg} />;
    default:
      return <TrainScreen dataset={top === "train" ? arg : undefined} />;
  }
}

function Shell() {
  const route = useRoute();
  const { error, info } = useInfo();
  const { token } = useAuth();
  const main = useRef<HTMLElement | null>(null);
  const screenSaid = useScreenChange(route, main); // the tab's title, the screen said, the focus kept on the page
  // the browser session whose cookie stands for the token on images, streams and downloads
  // (api/auth.ts): opened with the token, renewed while the page is open, and again when an image is refused
  useEffect(() => {
    if (!token) return;
    void ensureSession();
    const every = window.setInterval(() => void renewSession(), RENEW_EVERY_MS);
    return () => window.clearInterval(every);
  }, [token]);
  useEffect(() => installImageRetry(), []);
  // a focus lost with its control (a deleted row's button, a Stop gone with its run) stays near it
  useEffect(() => (main.current ? keepFocus(main.current) : undefined), []);
  const current = route[0] === "clone" ? "train" : route[0] === "again" ? "generate" : (route[0] ?? "train");
  return (
    <div className="app">
      <SkipLink main={main} to={href(...route)} />
      <header className="topbar">
        <a className="brand" href={href("train")}>
          <span className="logo" />
          lorastudio
        </a>
        <nav aria-label="screens">
          {NAV.map(([key, label]) => (
            <a key={key} href={href(key)} className={current === key ? "active" : undefined} aria-current={current === key ? "page" : undefined}>
              {label}
            </a>
          ))}
        </nav>
        <div className="topbar-right">
          <LiveBadge />
          {info && <span className="host muted">{info.host.name}</span>}
        </div>
      </header>
      <ErrorBanner message={error && `Cannot load the studio's information: ${error}`} />
      <UpdatedBanner />
      <LiveStatus text={screenSaid} testId="screen-announcement" />
      <main ref={main} tabIndex={-1}>
        {/* a new token remounts the screen, so it reloads what a 401 kept it from loading; so does
            another item (run A, then run B): nothing of A's screen (its messages, an upload's
            progress, a caption job) shows under B */}
        <Screen key={`${token ?? ""}\n${route.join("/")}`} route={route} />
      </main>
      <TokenDialog />
    </div>
  );
}

export function App() {
  return (
    <InfoProvider>
      <TrainingProvider>
        <Shell />
      </TrainingProvider>
    </InfoProvider>
  );
}
