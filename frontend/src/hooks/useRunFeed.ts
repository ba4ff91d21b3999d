// The run page's live state: the run, its peers, recent events and chart buffers, kept up to
// date by the websocket feed. A `snapshot` (sent first on every connection) replaces everything.
import { useEffect, useReducer, useRef, useState } from "react";
import { FeedClient, feedUrl, type FeedStatus } from "../feed";
import type { EventOut, FeedFrame, PeerOut, RunDetail, RunOut, StepOut } from "../generated/feed";
import { loadStepHistory } from "../history";
import { BoundedSeries, StepRate } from "../series";
import { stepStageRates } from "../stageRates";

export const EVENT_LIMIT = 200;
/** Steps the stage rates are observed over. */
export const RECENT_STEPS = 20;
const MOVING_MS = 15_000;

export function samplesPerSecond(step: StepOut): number | null {
  const samples = step.samples_sent - step.samples_lost;
  return step.duration_s > 0 ? samples / step.duration_s : null;
}

export interface RunFeedState {
  run: RunDetail | null;
  peers: PeerOut[];
  events: EventOut[];
  moving: Set<number>;
  status: FeedStatus;
  retryInMs?: number;
  /** Steps per second over recent steps (for the ETA). */
  stepRate: number | null;
  chartVersion: number;
  lastStep: StepOut | null;
  /** The newest steps, oldest first (each stage's observed rate). */
  recentSteps: StepOut[];
}

/** What the feed's series holds per step, in this order; the stages' served rates follow. */
export const SERIES = { loss: 0, rate: 1, time: 2, stages: 3 } as const;

export function useRunFeed(runId: number) {
  const series = useRef(new BoundedSeries(1000, 1000));
  const rate = useRef(new StepRate(20));
  const peers = useRef(new Map<number, PeerOut>());
  const movedAt = useRef(new Map<number, number>());
  const [, rerender] = useReducer((n: number) => n + 1, 0);
  const [state, setState] = useState<RunFeedState>({
    run: null,
    peers: [],
    events: [],
    moving: new Set(),
    status: "connecting",
    stepRate: null,
    chartVersion: 0,
    lastStep: null,
    recentSteps: [],
  });

  useEffect(() => {
    let snapshotGeneration = 0;
    let stopped = false;
    const movingNow = () => {
      const now = Date.now();
      const ids = new Set<number>();
      for (const [id, t] of movedAt.current) {
        if (now - t < MOVING_MS) ids.add(id);
        else movedAt.current.delete(id);
      }
      return ids;
    };

    const point = (step: StepOut) => ({
      step: step.step,
      values: [
        step.loss,
        samplesPerSecond(step),
        Date.parse(step.created_at) / 1000,
        ...stepStageRates(step, step.samples_counted.length),
      ],
    });
    const addStep = (step: StepOut) => {
      const added = series.current.push(point(step));
      rate.current.add(step.step, Date.parse(step.created_at));
      return added;
    };

    const notePeer = (peer: PeerOut) => {
      const before = peers.current.get(peer.id);
      if (before && before.stage !== null && peer.stage !== null && before.stage !== peer.stage)
        movedAt.current.set(peer.id, Date.now());
      peers.current.set(peer.id, peer);
    };

    const onFrame = (frame: FeedFrame) => {
      switch (frame.type) {
        case "snapshot": {
          peers.current.clear();
          for (const peer of frame.peers) notePeer(peer);
          series.current.clear();
          rate.current.clear();
          const steps = [...frame.steps].sort((a, b) => a.step - b.step);
          for (const step of steps) addStep(step);
          const events = [...frame.events].sort((a, b) => b.id - a.id).slice(0, EVENT_LIMIT);
          setState((s) => ({
            ...s,
            run: frame.run,
            peers: [...peers.current.values()],
            events,
            moving: movingNow(),
            stepRate: rate.current.rate(),
            chartVersion: s.chartVersion + 1,
            lastStep: steps[steps.length - 1] ?? null,
            recentSteps: steps.slice(-RECENT_STEPS),
          }));
          // The snapshot holds only recent steps: fetch the older history behind them.
          const generation = ++snapshotGeneration;
          const first = steps[0]?.step ?? 0;
          if (first > 0) {
            loadStepHistory(runId, first)
              .then((history) => {
                if (stopped || generation !== snapshotGeneration) return;
                series.current.prepend(history.map(point));
                setState((s) => ({ ...s, chartVersion: s.chartVersion + 1 }));
              })
              .catch(() => undefined); // the recent steps still show
          }
          break;
        }
        case "peer":
          notePeer(frame.peer);
          setState((s) => ({ ...s, peers: [...peers.current.values()], moving: movingNow() }));
          break;
        case "step": {
          const added = addStep(frame.step);
          if (!added) break;
          setState((s) => ({
            ...s,
            run: s.run
              ? {
                  ...s.run,
                  current_step: Math.max(s.run.current_step, frame.step.step + 1),
                  latest_loss: frame.step.loss ?? s.run.latest_loss,
                }
              : s.run,
            stepRate: rate.current.rate(),
            chartVersion: s.chartVersion + 1,
            lastStep: frame.step,
            recentSteps: [...s.recentSteps, frame.step].slice(-RECENT_STEPS),
          }));
          break;
        }
        case "event":
          setState((s) =>
            s.events.some((e) => e.id === frame.event.id)
              ? s
              : { ...s, events: [frame.event, ...s.events].slice(0, EVENT_LIMIT) },
          );
          break;
        case "run":
          // Run frames carry the plain run; keep the detail fields (parameter count, loss) we have.
          setState((s) => (s.run ? { ...s, run: { ...s.run, ...frame.run } } : s));
          break;
        case "health":
          setState((s) => (s.run ? { ...s, run: { ...s.run, health: frame.health } } : s));
          break;
        case "ping":
          break;
      }
    };

    const client = new FeedClient(feedUrl(runId), {
      onFrame,
      onStatus: (status, retryInMs) => setState((s) => ({ ...s, status, retryInMs })),
    });
    client.start();
    // Heartbeat ages and "moving" marks are time-based: refresh them every few seconds.
    const tick = window.setInterval(() => {
      setState((s) => ({ ...s, moving: movingNow() }));
      rerender();
    }, 5000);
    return () => {
      stopped = true;
      window.clearInterval(tick);
      client.stop();
    };
  }, [runId]);

  /** Apply a REST answer: a RunDetail replaces the run, a plain RunOut updates it. */
  const setRun = (run: RunDetail | RunOut) =>
    setState((s) => ({ ...s, run: { ...(s.run ?? {}), ...run } as RunDetail }));
  return { state, series: series.current, setRun };
}
