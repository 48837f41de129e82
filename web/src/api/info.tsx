/** /api/info, fetched once and shared; `reload()` after something it lists changed. */
import { createContext, type ReactNode, useCallback, useContext, useEffect, useState } from "react";
import { api } from "./endpoints";
import type { Info } from "./types";

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
  const reload = useCallback(async () => {
    try {
      setInfo(await api.info());
      setError(null);
    } catch (err) {
      setError(err instanceof Error ? err.message : String(err));
    }
  }, []);
  useEffect(() => {
    void reload();
  }, [reload]);
  return <Ctx.Provider value={{ info, error, reload }}>{children}</Ctx.Provider>;
}
