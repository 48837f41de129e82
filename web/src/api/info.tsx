/**
 * /api/info, fetched once (and again when the API token changes) and shared; `reload()` after
 * something it lists changed (the latest reload's answer wins). A server that requires a token while none is saved asks for one.
 */
import { createContext, type ReactNode, useCallback, useContext, useEffect, useState } from "react";
import { getToken, reportUnauthorized, useAuth } from "./auth";
import { ApiError } from "./client";
import { api } from "./endpoints";
import type { Info } from "./types";
import { isAbort, useLatest } from "../lib/latest";

interface InfoState {
  info: Info | null;
  error: string | null;
  reload: () => Promise<void>;
}

const Ctx = createContext<InfoState | null>(null);

export function useInfo(): InfoState {
  const v = useContext(Ctx);
  if (!v) throw new Error("useInfo outside <InfoProvider>");
  return v;
}

export function InfoProvider({ children }: { children: ReactNode }) {
  const [info, setInfo] = useState<Info | null>(null);
  const [error, setError] = useState<string | null>(null);
  const { token } = useAuth();
  // reloads overlap (an upload and a delete each reload): only the latest answer applies
  const loads = useLatest();
  const reload = useCallback(async () => {
    const ticket = loads.begin();
    try {
      const next = await api.info(ticket.signal);
      if (!ticket.current()) return;
      setInfo(next);
      setError(null);
      if (next.auth && !getToken()) reportUnauthorized(null);
    } catch (err) {
      if (isAbort(err) || !ticket.current()) return;
      // a 401 is answered by the token dialog, not by a "cannot reach the server" banner
      if (err instanceof ApiError && err.status === 401) setError(null);
      else setError(err instanceof Error ? err.message : String(err));
    }
  }, [loads]);
  useEffect(() => {
    void reload();
  }, [reload, token]);
  return <Ctx.Provider value={{ info, error, reload }}>{children}</Ctx.Provider>;
}
