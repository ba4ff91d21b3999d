// A run's stored checkpoints: complete steps with their size and a download of the whole model
// (a zip of config.json and every stage's safetensors file), and a button asking the peers for one.
import { useState } from "react";
import { call, client, errorMessage } from "../api";
import { formatBytes, formatTime } from "../format";
import type { CheckpointStepOut } from "../generated/api";
import { useLoad } from "../hooks/useLoad";

export function modelUrl(runId: number, step: number): string {
  return `/api/runs/${runId}/checkpoints/${step}/model`;
}

/** `refreshKey` changes when the page learns of a new checkpoint (a feed event); the list reloads. */
export function CheckpointsPanel({
  runId,
  refreshKey,
  canRequest,
}: {
  runId: number;
  refreshKey: number;
  canRequest: boolean;
}) {
  const path = { params: { path: { run_id: runId } } };
  const { data: steps, error: loadError } = useLoad(
    () => call(client.GET("/api/runs/{run_id}/checkpoints", path)),
    [runId, refreshKey],
  );
  const [requestError, setRequestError] = useState("");
  const [notice, setNotice] = useState("");
  const [busy, setBusy] = useState(false);
  const error = requestError || loadError;

  async function checkpointNow() {
    setBusy(true);
    setRequestError("");
    setNotice("");
    try {
      const answer = await call(client.POST("/api/runs/{run_id}/checkpoints", path));
      setNotice(`Requested at step ${answer.current_step}: the peers save their stages at the next step.`);
    } catch (e) {
      setRequestError(errorMessage(e));
    } finally {
      setBusy(false);
    }
  }

  const complete = (steps ?? []).filter((s) => s.complete);
  const partial = (steps ?? []).filter((s) => !s.complete);

  return (
    <div className="checkpoints" data-testid="checkpoints">
      <div className="card-head">
        <h2>Checkpoints</h2>
        <button
          type="button"
          className="secondary small"
          disabled={busy || !canRequest}
          title={canRequest ? "Save every stage at the next step" : "Only an active or paused run has peers to save"}
          onClick={() => void checkpointNow()}
        >
          {busy ? "Requesting…" : "Checkpoint now"}
        </button>
      </div>
      {error && <p className="error">{error}</p>}
      {notice && (
        <p className="notice checkpoint-note" data-testid="checkpoint-notice">
          {notice}
        </p>
      )}
      {steps === null && !error && <p className="muted">Loading…</p>}
      {steps !== null && complete.length === 0 && (
        <p className="muted">No complete checkpoint yet.</p>
      )}
      {complete.length > 0 && (
        <table className="table compact" data-testid="checkpoint-list">
          <thead>
            <tr>
              <th>Step</th>
              <th>Stages</th>
              <th>Size</th>
              <th>Saved</th>
              <th></th>
            </tr>
          </thead>
          <tbody>
            {complete.map((s) => (
              <tr key={s.step} data-testid="checkpoint" data-step={s.step}>
                <td>{s.step}</td>
                <td>{s.num_stages}</td>
                <td>{formatBytes(s.bytes)}</td>
                <td>{formatTime(latestSave(s))}</td>
                <td>
                  <a
                    href={modelUrl(runId, s.step)}
                    download={`run-${runId}-step-${s.step}.zip`}
                    data-testid="checkpoint-download"
                  >
                    Download model
                  </a>
                </td>
              </tr>
            ))}
          </tbody>
        </table>
      )}
      {partial.length > 0 && (
        <p className="muted checkpoint-note">
          In progress: step{partial.length === 1 ? "" : "s"}{" "}
          {partial.map((s) => `${s.step} (${s.stages.length}/${s.num_stages} stages)`).join(", ")}
        </p>
      )}
    </div>
  );
}

function latestSave(step: CheckpointStepOut): string | null {
  let latest: string | null = null;
  for (const stage of step.stages) if (latest === null || stage.created_at > latest) latest = stage.created_at;
  return latest;
}
