import { useEffect, useState } from "react";
import { api, errorMessage } from "../api";
import type { RunOut } from "../feed-types";
import type { User } from "../types";
import { formatCount, formatTime } from "../format";
import { parameterCount } from "../presets";
import { StatusBadge } from "../components/StatusBadge";

export function RunsPage({ user }: { user: User }) {
  const [runs, setRuns] = useState<RunOut[] | null>(null);
  const [error, setError] = useState("");

  useEffect(() => {
    api
      .get<RunOut[]>("/api/runs")
      .then(setRuns)
      .catch((e) => setError(errorMessage(e)));
  }, []);

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
              <th>Created</th>
            </tr>
          </thead>
          <tbody>
            {runs.map((run) => (
              <tr key={run.id}>
                <td>
                  <a href={`#/runs/${run.id}`}>{run.name}</a>
                </td>
                <td>
                  <StatusBadge status={run.status} />
                </td>
                <td>
                  {run.model_preset}{" "}
                  <span className="muted">({formatCount(parameterCount(run.model_preset))} parameters)</span>
                </td>
                <td>{run.num_stages}</td>
                <td>
                  {run.current_step}
                  {run.max_steps ? ` / ${run.max_steps}` : ""}
                </td>
                <td>{new Date(run.created_at).toLocaleDateString()} {formatTime(run.created_at)}</td>
              </tr>
            ))}
          </tbody>
        </table>
      )}
    </section>
  );
}
