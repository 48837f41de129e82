/** The providers every screen needs in a test: /api/info (InfoProvider) and, unless left out, the
 * training status and its event stream (TrainingProvider), as App gives them. */
import { render } from "@testing-library/react";
import type { ReactElement } from "react";
import { InfoProvider } from "../api/info";
import { TrainingProvider } from "../api/training";

export interface ProviderOptions {
  /** Whether to wrap in TrainingProvider too (default true; false for a screen that needs only the info). */
  training?: boolean;
}

/** `ui` inside the providers (for `rerender`). */
export function withProviders(ui: ReactElement, { training = true }: ProviderOptions = {}): ReactElement {
  return <InfoProvider>{training ? <TrainingProvider>{ui}</TrainingProvider> : ui}</InfoProvider>;
}

/** Render `ui` inside the providers; what `render` returns. */
export function renderWithProviders(ui: ReactElement, options: ProviderOptions = {}) {
  return render(withProviders(ui, options));
}
