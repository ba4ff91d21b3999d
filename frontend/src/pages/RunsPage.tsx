import { useState } from "react";
import { call, client } from "../api";
import type { PeerOut, RunDetail, UserOut } from "../generated/api";
import { formatCount, formatNumber, formatTime } from "../format";
import { ArchiveButton, TagList } from "../components/RunLabels";
import { LossSparkline } from "../components/Sparkline";
import { HealthBadge } from "../components/HealthBanner";
import { StatusBadge } from "../components/StatusBadge";
import { useLoad } from "../hooks/useLoad";

// Peer states worth a word in the list; the rest (left, kicked, banned) are departed peers.
const SHOWN_STATES: PeerOut["state"][] = ["active", "joining", "lost"];

function PeerSummary({ counts }: { counts: RunDetail["peer_counts"] }) {
  const parts = SHOWN_STATES.filter((s) => (counts[s] ?? 0) > 0 && s !== "active").map((s) => `${counts[s]} ${s}`);
  return (
    <span data-testid="run-peers">
      {counts.active ?? 0}
      {parts.length > 0 && <span className="muted"> ({parts.join(", ")})</span>}
    </span>
  );
}

export function RunsPage({ user }: { user: UserOut }) {
  const [showArchived, setShowArchived] = useState(false);
  const [selected, setSelected] = useState<number[]>([]);
  const { data: runs, error, reload } = useLoad(
    () => call(client.GET("/api/runs", { params: { query: { archived: showArchived } } })),
    [showArchived],
  );
  const toggle = (runId: number) =>
    setSelected((ids) => (ids.includes(runId) ? ids.filter((id) => id !== runId) : [...ids, runId]));

  return (
    <section>
      <div className="page-head">
        <h1>{user.role === "admin" ? "All runs" : "Your runs"}</h1>
        <div className="head-actions">
          <label className="inline">
            <input
              type="checkbox"
              checked={showArchived}
              onChange={(e) => setShowArchived(e.target.checked)}
              data-testid="show-archived"
            />
            show archived
          </label>
          {selected.length >= 2 ? (
            <a className="button secondary" href={`#/compare?runs=${selected.join(",")}`} data-testid="compare-link">
              Compare {selected.length} runs
            </a>
          ) : (
            <span className="muted">tick two runs to compare</span>
          )}
          <a className="button" href="#/runs/new">
            New run
          </a>
        </div>
      </div>
      {error && <p className="error">{error}</p>}
      {runs === null && !error && <p className="muted">Loading…</p>}
      {runs !== null && runs.length === 0 && (
        <p className="muted">No runs yet. Create one and share its join command.</p>
      )}
      {runs !== null && runs.length > 0 && (
        <div className="table-scroll">
          <table className="table" data-testid="runs-table">
            <thead>
              <tr>
                <th>
                  <span className="visually-hidden">Compare</span>
                </th>
                <th>Name</th>
                {user.role === "admin" && <th>Owner</th>}
                <th>Status</th>
                <th>Model</th>
                <th>Stages</th>
                <th>Step</th>
                <th>Loss</th>
                <th>Loss curve</th>
                <th>Peers</th>
                <th>Created</th>
                <th>
                  <span className="visually-hidden">Actions</span>
                </th>
              </tr>
            </thead>
            <tbody>
              {runs.map((run) => (
                <tr
                  key={run.id}
                  data-testid="run-row"
                  data-run-id={run.id}
                  className={run.archived ? "archived" : undefined}
                >
                  <td>
                    <input
                      type="checkbox"
                      checked={selected.includes(run.id)}
                      onChange={() => toggle(run.id)}
                      aria-label={`compare ${run.name}`}
                      data-testid="compare-select"
                    />
                  </td>
                  <td>
                    <a href={`#/runs/${run.id}`}>{run.name}</a> <TagList tags={run.tags} />
                    {run.archived && <span className="muted"> (archived)</span>}
                  </td>
                  {user.role === "admin" && <td data-testid="run-owner">{run.owner_name}</td>}
                  <td>
                    <StatusBadge status={run.status} />
                    <HealthBadge health={run.health} />
                  </td>
                  <td>
                    {run.model_preset}{" "}
                    <span className="muted" data-testid="run-parameters">
                      ({formatCount(run.parameter_count)} parameters)
                    </span>
                  </td>
                  <td>{run.num_stages}</td>
                  <td>
                    {run.current_step}
                    {run.max_steps ? ` / ${run.max_steps}` : ""}
                  </td>
                  <td data-testid="run-loss">{formatNumber(run.latest_loss)}</td>
                  <td>
                    <LossSparkline runId={run.id} step={run.current_step} />
                  </td>
                  <td>
                    <PeerSummary counts={run.peer_counts} />
                  </td>
                  <td>
                    {new Date(run.created_at).toLocaleDateString()} {formatTime(run.created_at)}
                  </td>
                  <td>{run.owner_id === user.id && <ArchiveButton run={run} onSaved={reload} />}</td>
                </tr>
              ))}
            </tbody>
          </table>
        </div>
      )}
    </section>
  );
}
