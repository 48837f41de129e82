/**
 * The base models the pickers offer: GET /api/models (the vetted catalogue) when the server has
 * it, else GET /api/info's `models` (the folders under models/).
 */
import { useEffect, useMemo, useState } from "react";
import { choicesFromCatalogue, choicesFromInfo, type ModelChoice } from "../lib/baseModels";
import { ApiError } from "./client";
import { api } from "./endpoints";
import { useInfo } from "./info";
import { ROUTES } from "./routes.gen";
import type { CatalogueModel } from "./types";

const HAS_CATALOGUE = ROUTES.has("/api/models");

/** The picker choices, or null until known (the catalogue loads once per mounted screen). */
export function useModelChoices(): ModelChoice[] | null {
  const { info } = useInfo();
  // undefined: loading; null: no catalogue (older server or an error): use info.models
  const [catalogue, setCatalogue] = useState<CatalogueModel[] | null | undefined>(HAS_CATALOGUE ? undefined : null);
  useEffect(() => {
    if (!HAS_CATALOGUE) return;
    let live = true;
    api.models().then(
      (list) => live && setCatalogue(list),
      (err: unknown) => {
        // a 401 is handled by the token dialog (the screen remounts); anything else falls back
        if (live && !(err instanceof ApiError && err.status === 401)) setCatalogue(null);
      },
    );
    return () => {
      live = false;
    };
  }, []);
  return useMemo(() => {
    if (catalogue) return choicesFromCatalogue(catalogue);
    if (catalogue === null && info) return choicesFromInfo(info.models);
    return null;
  }, [catalogue, info]);
}
