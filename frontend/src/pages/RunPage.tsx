import { useEffect, useMemo, useState } from "react";
import { call, client, errorMessage } from "../api";
import { Chart } from "../components/Chart";
import { CheckpointsPanel } from "../components/CheckpointsPanel";
import { EventLog } from "../components/EventLog";
import { HealthBadge, HealthBanner } from "../components/HealthBanner";
import { JoinPanel } from "../components/JoinPanel";
import { ArchiveButton, RunLabels } from "../components/RunLabels";
import { LeaderboardPanel } from "../components/LeaderboardPanel";
import { SpotCheckPanel } from "../components/SpotCheckPanel";
import { StatusBadge } from "../components/StatusBadge";
import { StepTimePanel } from "../components/StepTimePanel";
import { SwarmView } from "../components/SwarmView";
import { WebhooksPanel } from "../components/WebhooksPanel";
import type { UserOut } from "../generated/api";
import { formatBytes, formatCount, formatNumber, percentOf } from "../format";
import { etaText, shownRate } from "../health";
import { SERIES, useRunFeed } from "../hooks/useRunFeed";
import { useRunMetrics } from "../hooks/useRunMetrics";
import { bottleneckStage, stageRates } from "../stageRates";
import { isWebhookKind } from "../webhooks";

const STAGE_COLORS = ["#2563eb", "#16a34a", "#f59e0b", "#dc2626", "#7c3aed", "#0891b2", "#db2777", "#65a30d"];
const formatRetries = (value: number | null) => (value === null ? "—" : String(Math.round(value)));

function FeedIndicator({ status, retryInMs }: { status: string; retryInMs?: number }) {
  const text =
    status === "reconnecting" && retryInMs !== undefined ? `reconnecting in ${Math.ceil(retryInMs / 1000)}s` : status;
  return (
    <span className={`feed feed-${status}`} data-testid="feed-status" data-status={status}>
      ● {text}
    </span>
  );
}

export function RunPage({ runId, user }: { runId: number; user: UserOut }) {
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
  const numStages = run?.num_stages ?? 0;
  const columns = useMemo(
    () => series.columns(SERIES.stages + numStages),
    [series, state.chartVersion, numStages],
  );
  const times = columns[SERIES.time + 1];
  const lossData = useMemo(() => [columns[0], columns[SERIES.loss + 1]], [columns]);
  const rateData = useMemo(() => [columns[0], columns[SERIES.rate + 1]], [columns]);
  const stageData = useMemo(() => [columns[0], ...columns.slice(SERIES.stages + 1)], [columns]);
  const rates = useMemo(() => {
    const claims = new Map<number, number>();
    for (const peer of state.peers)
      if (peer.state === "active" && peer.stage !== null)
        claims.set(peer.stage, (claims.get(peer.stage) ?? 0) + peer.throughput);
    return stageRates(state.recentSteps, numStages, claims);
  }, [state.recentSteps, state.peers, numStages]);
  const bottleneck = bottleneckStage(rates);
  const stageStyles = useMemo(
    () =>
      Array.from({ length: numStages }, (_, stage) => ({
        label: stage === bottleneck ? `stage ${stage} (bottleneck)` : `stage ${stage}`,
        color: STAGE_COLORS[stage % STAGE_COLORS.length],
      })),
    [numStages, bottleneck],
  );
  const traffic = useMemo(() => metrics.traffic.columns(), [metrics, metricsVersion]);
  const retriesData = useMemo(() => [traffic.data[0], traffic.data[1]], [traffic]);
  const bytesData = useMemo(() => [traffic.data[0], traffic.data[2]], [traffic]);

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
  // Only a training run has a rate and an ETA; otherwise the health banner says why not.
  const eta = etaText(run.health, remaining, state.stepRate);
  const rateColumn = columns[SERIES.rate + 1];
  const lastRate = state.lastStep ? rateColumn[rateColumn.length - 1] : null;
  // The newest 'checkpoint' event (events are newest first): a new one reloads the checkpoint list.
  const checkpointKey = state.events.find((e) => e.kind === "checkpoint")?.id ?? 0;
  const webhookKey = state.events.find((e) => isWebhookKind(e.kind))?.id ?? 0;

  return (
    <section className="run-page">
      <div className="page-head">
        <div>
          <h1 data-testid="run-name">{run.name}</h1>
          <div className="muted">
            <span data-testid="run-owner">by {run.owner_name}</span> · {run.model_preset} ·{" "}
            {formatCount(run.parameter_count)} parameters · {run.num_stages} stage
            {run.num_stages === 1 ? "" : "s"} · batch {run.target_batch_size} (micro {run.microbatch_size}) · seq{" "}
            {run.seq_len} · {run.optimizer} lr {run.learning_rate} · compression {run.compression} ·{" "}
            <span data-testid="spot-check-fraction">
              {run.spot_check_fraction > 0 ? `spot checks ${percentOf(run.spot_check_fraction)}%` : "spot checks off"}
            </span>
          </div>
          <RunLabels run={run} editable={run.owner_id === user.id} onSaved={setRun} />
        </div>
        <div className="head-actions">
          {run.owner_id === user.id && <ArchiveButton run={run} onSaved={setRun} />}
          <StatusBadge status={run.status} />
          <HealthBadge health={run.health} />
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
      <HealthBanner health={run.health} />

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
          <span className="stat-value" data-testid="samples-per-s">
            {formatNumber(shownRate(run.health, lastRate), 1)}
          </span>
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
        <WebhooksPanel runId={runId} refreshKey={webhookKey} />
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
          rates={rates}
          bottleneck={bottleneck}
          health={run.health}
        />
      </div>

      <div className="card">
        <LeaderboardPanel runId={runId} refreshKey={run.current_step} />
      </div>

      <div className="grid-2">
        <div className="card">
          <Chart
            title="Loss"
            label="loss"
            color="#2563eb"
            data={lossData}
            times={times}
            version={state.chartVersion}
            testId="loss-chart"
            smoothable
          />
        </div>
        <div className="card">
          <Chart
            title="Throughput"
            label="samples/s"
            color="#16a34a"
            data={rateData}
            times={times}
            version={state.chartVersion}
            testId="rate-chart"
            smoothable
          />
        </div>
      </div>

      <div className="card">
        <Chart
          title="Throughput per stage (served)"
          label="samples/s"
          color={STAGE_COLORS[0]}
          series={stageStyles}
          data={stageData}
          times={times}
          version={state.chartVersion}
          testId="stage-rate-chart"
          smoothable
        />
        <p className="muted">
          What each stage's peers served per step (samples counted over the step's time): observed, so never more
          than the run's own samples/s. The bottleneck is the stage working nearest what its peers claim.
        </p>
      </div>

      <div className="grid-2">
        <div className="card">
          <Chart
            title="Retries"
            label="retried calls"
            color="#dc2626"
            data={retriesData}
            times={traffic.times}
            version={metricsVersion}
            format={formatRetries}
            testId="retries-chart"
          />
        </div>
        <div className="card">
          <Chart
            title="Wire bytes"
            label="bytes/step"
            color="#7c3aed"
            data={bytesData}
            times={traffic.times}
            version={metricsVersion}
            format={formatBytes}
            testId="wire-bytes-chart"
            smoothable
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
