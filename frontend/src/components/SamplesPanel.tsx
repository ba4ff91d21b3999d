// Text a checkpoint's model writes after a fixed set of prompts, with the loss it was trained to.
// The coordinator generates them on the first request (in the background), so the panel asks again
// while they are being written.
import { useEffect, useState } from "react";
import { call, client, errorMessage } from "../api";
import type { SamplesOut } from "../generated/api";
import { SAMPLES_POLL_MS, samplesCaption, samplesPending } from "../samples";

export function SamplesPanel({ runId, step }: { runId: number; step: number }) {
  const [out, setOut] = useState<SamplesOut | null>(null);
  const [error, setError] = useState("");

  useEffect(() => {
    let stopped = false;
    let timer: ReturnType<typeof setTimeout> | undefined;
    setOut(null);
    setError("");
    async function ask() {
      try {
        const answer = await call(
          client.GET("/api/runs/{run_id}/checkpoints/{step}/samples", { params: { path: { run_id: runId, step } } }),
        );
        if (stopped) return;
        setOut(answer);
        if (samplesPending(answer)) timer = setTimeout(() => void ask(), SAMPLES_POLL_MS);
      } catch (e) {
        if (!stopped) setError(errorMessage(e));
      }
    }
    void ask();
    return () => {
      stopped = true;
      clearTimeout(timer);
    };
  }, [runId, step]);

  return (
    <div className="samples" data-testid="samples" data-step={step} data-status={out?.status ?? "loading"}>
      {error && <p className="error">{error}</p>}
      {!error && <p className="muted">{out ? samplesCaption(out) : `Step ${step} · loading samples…`}</p>}
      {out?.samples?.samples.map((sample) => (
        <pre key={sample.prompt} className="sample" data-testid="sample">
          <span className="sample-prompt">{sample.prompt}</span>
          {sample.text}
        </pre>
      ))}
    </div>
  );
}
