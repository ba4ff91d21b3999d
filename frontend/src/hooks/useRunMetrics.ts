// The run page's per-step metrics (spot-check costs, where a step's time goes): they are not in the
// feed, so they are read from GET /api/runs/{id}/metrics each time the feed reports a new step,
// from where the last read stopped. Opening the page reads only the most recent WINDOW steps, so a
// long run costs a few requests, not its whole history.
import { useEffect, useRef, useState } from "react";
import { call, client } from "../api";
import { CheckCosts, wholeSteps } from "../checks";
import { MetricSeries } from "../stepMetrics";
import { StepTimes } from "../stepTime";

const WINDOW = 1000;
const PAGE = 1000;

export interface RunMetrics {
  checks: CheckCosts;
  times: StepTimes;
  /** Stage calls retried and data-plane bytes, per step. */
  traffic: MetricSeries;
}

export const TRAFFIC_NAMES = ["retries", "wire_bytes"] as const;

function newMetrics(): RunMetrics {
  return { checks: new CheckCosts(), times: new StepTimes(), traffic: new MetricSeries(TRAFFIC_NAMES) };
}

export function useRunMetrics(runId: number, latestStep: number | null): { metrics: RunMetrics; version: number } {
  const [metrics, setMetrics] = useState(newMetrics);
  const [version, setVersion] = useState(0);
  const refresh = useRef<(latest: number) => void>(() => undefined);

  useEffect(() => {
    const mine = newMetrics();
    setMetrics(mine);
    let after: number | null = null;
    let wanted = -1;
    let loading = false;
    let again = false;
    let stopped = false;

    // One read at a time; steps reported meanwhile are picked up by one more read when it ends.
    const load = async () => {
      if (loading) {
        again = true;
        return;
      }
      loading = true;
      try {
        do {
          again = false;
          for (;;) {
            const from: number = after ?? Math.max(-1, wanted - WINDOW);
            const rows = await call(
              client.GET("/api/runs/{run_id}/metrics", {
                params: { path: { run_id: runId }, query: { after_step: from, limit: PAGE } },
              }),
            );
            if (stopped) return;
            const page = wholeSteps(rows, PAGE);
            mine.checks.add(page.rows);
            mine.times.add(page.rows);
            mine.traffic.add(page.rows);
            after = Math.max(from, page.after ?? from);
            setVersion((v) => v + 1);
            if (!page.more) break;
          }
        } while (again && !stopped);
      } catch {
        // What is charted stays; the next step's read tries again from the same place.
      } finally {
        loading = false;
      }
    };
    refresh.current = (latest: number) => {
      wanted = Math.max(wanted, latest);
      void load();
    };
    return () => {
      stopped = true;
      refresh.current = () => undefined;
    };
  }, [runId]);

  useEffect(() => {
    if (latestStep !== null) refresh.current(latestStep);
  }, [runId, latestStep]);

  return { metrics, version };
}
