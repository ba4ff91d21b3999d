// The load-and-show pattern of the pages: fetch when the dependencies change, keep the error's
// message for display, and reload on demand (after an action, on a timer).
import { useCallback, useEffect, useRef, useState, type DependencyList } from "react";
import { errorMessage } from "../api";

export interface Loaded<T> {
  /** The latest successful result; null until the first one arrives. */
  data: T | null;
  /** Message of the latest load's failure; "" once a load succeeds. */
  error: string;
  loading: boolean;
  reload: () => void;
}

/**
 * Runs `load` now and whenever `deps` change. While a reload runs the previous data stays on
 * screen, and a failed reload keeps it too, so a periodic refresh never blanks a table. Only the
 * newest load's answer counts: one that arrives after a newer load started, or after the
 * component went away, is dropped.
 */
export function useLoad<T>(load: () => Promise<T>, deps: DependencyList): Loaded<T> {
  const [state, setState] = useState<Omit<Loaded<T>, "reload">>({ data: null, error: "", loading: true });
  const latest = useRef(load);
  latest.current = load;
  const generation = useRef(0);

  const reload = useCallback(() => {
    const mine = ++generation.current;
    setState((s) => (s.loading ? s : { ...s, loading: true }));
    latest.current().then(
      (data) => {
        if (mine === generation.current) setState({ data, error: "", loading: false });
      },
      (e: unknown) => {
        if (mine === generation.current) setState((s) => ({ ...s, error: errorMessage(e), loading: false }));
      },
    );
  }, []);

  useEffect(() => {
    reload();
    return () => {
      generation.current++;
    };
    // `deps` stand for what `load` reads, as with useEffect; `load` itself is new on every render.
    // eslint-disable-next-line react-hooks/exhaustive-deps
  }, deps);

  return { ...state, reload };
}
