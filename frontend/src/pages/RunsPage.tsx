import { call, client } from "../api";
import type { PeerOut, RunDetail, UserOut } from "../generated/api";
import { formatCount, formatNumber, formatTime } from "../format";
import { StatusBadge } from "../components/StatusBadge";
import { useLoad } from "../hooks/useLoad";

// Peer states worth a word in the list; the rest (left, kicked, banned) are departed peers.
const SHOWN_STATES: PeerOut["state"][] = ["active", "joining", "lost"];

function PeerSummary({ counts }: { counts: RunDetail["peer_counts"] }) {
  const parts = SHOWN_STATES.filter((s) => (counts[s] ?? 0) > 0 && s !== "active").map(
    (s) => `${counts[s]} ${s}`,
  );
  return (
    <span data-testid="run-peers">
      {counts.active ?? 0}
      {parts.length > 0 && <span className="muted"> ({parts.join(", ")})</span>}
    </span>
  );
}

export function RunsPage({ user }: { user: UserOut }) {
  const { data: runs, error } = useLoad(() => call(client.GET("/api/runs")), []);

  return (
    <section>
      <div className="page-head">
        <h1>{user.role === "admin" ? "All runs" : "Your runs"}</h1>
        <a className="button" href="#/runs/new">
          New run
        </a>
      </div>
      {error && <p className="error">{error}</p>}
      {runs === null && !error && <p className="muted">Loading…</p>}
      {runs !== null && runs.length === 0 && (
        <p className="muted">No runs yet. Create one and share its join command.</p>
      )}
      {runs !== null && runs.length > 0 && (
        <table className="table" data-testid="runs-table">
          <thead>
            <tr>
              <th>Name</th>
              <th>Status</th>
              <th>Model</th>
              <th>Stages</th>
              <th>Step</th>
              <th>Loss</th>
              <th>Peers</th>
              <th>Created</th>
            </tr>
          </thead>
          <tbody>
            {runs.map((run) => (
              <tr key={run.id} data-testid="run-row" data-run-id={run.id}>
                <td>
                  <a href={`#/runs/${run.id}`}>{run.name}</a>
                </td>
                <td>
                  <StatusBadge status={run.status} />
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
                  <PeerSummary counts={run.peer_counts} />
                </td>
                <td>
                  {new Date(run.created_at).toLocaleDateString()} {formatTime(run.created_at)}
                </td>
              </tr>
            ))}
          </tbody>
        </table>
      )}
    </section>
  );
}
