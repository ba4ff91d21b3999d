// A run's stored checkpoints: complete steps with their size, downloads of the model (a zip of
// every stage's safetensors file, or the Hugging Face transformers export; each with a README.md),
// text samples of a chosen checkpoint next to its loss, and a button asking the peers for one.
import { useState } from "react";
import { call, client, errorMessage } from "../api";
import { formatBytes, formatTime } from "../format";
import type { CheckpointStepOut } from "../generated/api";
import { useLoad } from "../hooks/useLoad";
import { hfModelUrl } from "../samples";
import { SamplesPanel } from "./SamplesPanel";

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
  const [chosen, setChosen] = useState<number | null>(null);
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
  // The newest checkpoint's samples until another is chosen (and while the chosen one is still kept).
  const samplesStep = complete.some((s) => s.step === chosen) ? chosen : (complete[0]?.step ?? null);

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
                  {" · "}
                  <a
                    href={hfModelUrl(runId, s.step)}
                    download={`run-${runId}-step-${s.step}-hf.zip`}
                    title="A Hugging Face transformers model: config, weights, tokenizer, README"
                    data-testid="checkpoint-download-hf"
                  >
                    Hugging Face
                  </a>
                  {" · "}
                  <button
                    type="button"
                    className="link"
                    disabled={s.step === samplesStep}
                    onClick={() => setChosen(s.step)}
                    data-testid="checkpoint-samples"
                  >
                    Samples
                  </button>
                </td>
              </tr>
            ))}
          </tbody>
        </table>
      )}
      {samplesStep !== null && (
        <>
          <h3>Samples</h3>
          <SamplesPanel runId={runId} step={samplesStep} />
        </>
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
