import { useEffect, useMemo, useState } from "react";
import { call, client, errorMessage } from "../api";
import { Chart } from "../components/Chart";
import { CheckpointsPanel } from "../components/CheckpointsPanel";
import { EventLog } from "../components/EventLog";
import { JoinPanel } from "../components/JoinPanel";
import { SpotCheckPanel } from "../components/SpotCheckPanel";
import { StatusBadge } from "../components/StatusBadge";
import { StepTimePanel } from "../components/StepTimePanel";
import { SwarmView } from "../components/SwarmView";
import { formatCount, formatNumber, percentOf } from "../format";
import { useRunFeed } from "../hooks/useRunFeed";
import { useRunMetrics } from "../hooks/useRunMetrics";
import { formatDuration } from "../series";

function FeedIndicator({ status, retryInMs }: { status: string; retryInMs?: number }) {
  const text =
    status === "reconnecting" && retryInMs !== undefined
      ? `reconnecting in ${Math.ceil(retryInMs / 1000)}s`
      : status;
  return (
    <span className={`feed feed-${status}`} data-testid="feed-status" data-status={status}>
      ● {text}
    </span>
  );
}

export function RunPage({ runId }: { runId: number }) {
  const { state, series, setRun } = useRunFeed(runId);
  const { metrics, version: metricsVersion } = useRunMetrics(runId, state.lastStep?.step ?? null);
  const [error, setError] = useState("");
  const [busy, setBusy] = useState(false);
  const [showDeparted, setShowDeparted] = useState(false);

  // Show the run at once from REST; the feed's snapshot takes over when it arrives.
  useEffect(() => {
    call(client.GET("/api/runs/{run_id}", { params: { path: { run_id: runId } } }))
      .then((run) => setRun(run))
      .catch((e) => setError(errorMessage(e)));
    // eslint-disable-next-line react-hooks/exhaustive-deps
  }, [runId]);

  const run = state.run;
  const columns = useMemo(() => series.columns(2), [series, state.chartVersion]);
  const lossData = useMemo(() => [columns[0], columns[1]], [columns]);
  const rateData = useMemo(() => [columns[0], columns[2]], [columns]);

  async function action(name: "pause" | "resume") {
    setBusy(true);
    setError("");
    try {
      const path = { params: { path: { run_id: runId } } };
      setRun(
        await call(
          name === "pause"
            ? client.POST("/api/runs/{run_id}/pause", path)
            : client.POST("/api/runs/{run_id}/resume", path),
        ),
      );
    } catch (e) {
      setError(errorMessage(e));
    } finally {
      setBusy(false);
    }
  }

  if (!run) {
    return error ? <p className="error">{error}</p> : <p className="muted">Loading run…</p>;
  }

  const remaining = run.max_steps ? Math.max(0, run.max_steps - run.current_step) : null;
  const livePeers = state.peers.filter((p) => p.state === "active").length;
  let eta: string;
  if (remaining === null) eta = "no step limit";
  else if (remaining === 0 || run.status === "finished") eta = "done";
  else if (run.status !== "active") eta = run.status;
  else if (livePeers === 0) eta = "waiting for peers";
  else eta = state.stepRate ? formatDuration(remaining / state.stepRate) : "—";
  const lastRate = state.lastStep ? columns[2][columns[2].length - 1] : null;
  // The newest 'checkpoint' event (events are newest first): a new one reloads the checkpoint list.
  const checkpointKey = state.events.find((e) => e.kind === "checkpoint")?.id ?? 0;

  return (
    <section className="run-page">
      <div className="page-head">
        <div>
          <h1 data-testid="run-name">{run.name}</h1>
          <div className="muted">
            {run.model_preset} · {formatCount(run.parameter_count)} parameters · {run.num_stages} stage
            {run.num_stages === 1 ? "" : "s"} · batch {run.target_batch_size} (micro {run.microbatch_size}) · seq{" "}
            {run.seq_len} · {run.optimizer} lr {run.learning_rate} · compression {run.compression} ·{" "}
            <span data-testid="spot-check-fraction">
              {run.spot_check_fraction > 0 ? `spot checks ${percentOf(run.spot_check_fraction)}%` : "spot checks off"}
            </span>
          </div>
        </div>
        <div className="head-actions">
          <StatusBadge status={run.status} />
          <FeedIndicator status={state.status} retryInMs={state.retryInMs} />
          {run.status === "active" && (
            <button type="button" className="secondary" disabled={busy} onClick={() => void action("pause")}>
              Pause
            </button>
          )}
          {run.status === "paused" && (
            <button type="button" disabled={busy} onClick={() => void action("resume")}>
              Resume
            </button>
          )}
        </div>
      </div>
      {error && <p className="error">{error}</p>}

      <div className="stats">
        <div className="stat">
          <span className="stat-label">Step</span>
          <span className="stat-value" data-testid="current-step">
            {run.current_step}
            {run.max_steps ? <span className="muted"> / {run.max_steps}</span> : null}
          </span>
        </div>
        <div className="stat">
          <span className="stat-label">Loss</span>
          <span className="stat-value" data-testid="latest-loss">
            {formatNumber(run.latest_loss)}
          </span>
        </div>
        <div className="stat">
          <span className="stat-label">Samples/s</span>
          <span className="stat-value">{formatNumber(lastRate, 1)}</span>
        </div>
        <div className="stat">
          <span className="stat-label">ETA</span>
          <span className="stat-value" data-testid="eta">
            {eta}
          </span>
        </div>
        <div className="stat">
          <span className="stat-label">Peers</span>
          <span className="stat-value" data-testid="peer-count">
            {livePeers}
          </span>
        </div>
      </div>

      <div className="grid-2">
        <div className="card">
          <h2>Join this run</h2>
          <JoinPanel runId={runId} />
        </div>
        <div className="card">
          <h2>Events</h2>
          <EventLog events={state.events} />
        </div>
      </div>

      <div className="card">
        <CheckpointsPanel
          runId={runId}
          refreshKey={checkpointKey}
          canRequest={run.status === "active" || run.status === "paused"}
        />
      </div>

      <div className="card">
        <div className="card-head">
          <h2>Swarm</h2>
          <label className="inline">
            <input type="checkbox" checked={showDeparted} onChange={(e) => setShowDeparted(e.target.checked)} />
            show departed peers
          </label>
        </div>
        <SwarmView
          numStages={run.num_stages}
          peers={state.peers}
          moving={state.moving}
          showDeparted={showDeparted}
        />
      </div>

      <div className="grid-2">
        <div className="card">
          <Chart
            title="Loss"
            label="loss"
            color="#2563eb"
            data={lossData}
            version={state.chartVersion}
            testId="loss-chart"
          />
        </div>
        <div className="card">
          <Chart
            title="Throughput"
            label="samples/s"
            color="#16a34a"
            data={rateData}
            version={state.chartVersion}
            testId="rate-chart"
          />
        </div>
      </div>

      <div className="card">
        <StepTimePanel times={metrics.times} version={metricsVersion} />
      </div>

      <div className="card">
        <SpotCheckPanel costs={metrics.checks} version={metricsVersion} fraction={run.spot_check_fraction} />
      </div>
    </section>
  );
}
