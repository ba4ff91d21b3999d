// A participant's own view of what its peer gave a run, opened from the link the peer printed when
// it registered: no account needed, the link is the key. Refreshed while the page is open.
import { useEffect } from "react";
import { call, client } from "../api";
import { formatBytes, formatCount, formatSeconds } from "../format";
import { useLoad } from "../hooks/useLoad";
import {
  LEDGER_COLUMNS,
  shareOfCounted,
  type Contribution,
  type LedgerColumn,
} from "../ledger";

const REFRESH_MS = 10_000;

function value(c: Contribution, column: LedgerColumn): string {
  if (column === "compute_s" || column === "uptime_s")
    return formatSeconds(c[column]);
  if (column === "bytes_moved") return formatBytes(c[column]);
  return formatCount(c[column]);
}

function Figures({
  of,
  counted,
  testId,
}: {
  of: Contribution;
  counted: number;
  testId: string;
}) {
  return (
    <div className="stats" data-testid={testId}>
      {LEDGER_COLUMNS.map((c) => (
        <div className="stat" key={c.key} title={c.title}>
          <span className="stat-label">{c.label}</span>
          <span className="stat-value" data-testid={`${testId}-${c.key}`}>
            {value(of, c.key)}
          </span>
        </div>
      ))}
      <div className="stat">
        <span className="stat-label">Share of the run</span>
        <span className="stat-value">
          {shareOfCounted(of.samples_trained, counted)}
        </span>
      </div>
    </div>
  );
}

export function ContributionPage({ token }: { token: string }) {
  const loaded = useLoad(
    () =>
      call(
        client.GET("/api/contributions/{token}", {
          params: { path: { token } },
        }),
      ),
    [token],
  );
  const { reload } = loaded;
  useEffect(() => {
    const timer = window.setInterval(reload, REFRESH_MS);
    return () => window.clearInterval(timer);
  }, [reload]);
  const own = loaded.data;

  return (
    <main className="contribution-page" data-testid="contribution">
      {loaded.error && !own && (
        <p className="error" role="alert">
          {loaded.error}
        </p>
      )}
      {!own && !loaded.error && <p className="muted">Loading…</p>}
      {own && (
        <>
          <h1>
            Your contribution to{" "}
            <span data-testid="contribution-run">{own.run_name}</span>
          </h1>
          <p className="muted">
            Run {own.run_id}: {formatCount(own.run_samples_counted)} samples
            counted so far. You are{" "}
            <strong data-testid="contribution-rank">
              #{own.rank} of {own.participants}
            </strong>{" "}
            participants.
          </p>
          <div className="card">
            <h2>
              This peer: {own.peer.peer_name}{" "}
              <span className="muted">({own.peer.state})</span>
            </h2>
            <Figures
              of={own.peer}
              counted={own.run_samples_counted}
              testId="contribution-peer"
            />
          </div>
          <div className="card">
            <h2>
              Your token: {own.participant.participant}{" "}
              <span className="muted">
                ({own.participant.peers} peer
                {own.participant.peers === 1 ? "" : "s"})
              </span>
            </h2>
            <Figures
              of={own.participant}
              counted={own.run_samples_counted}
              testId="contribution-participant"
            />
          </div>
          <p className="muted">
            Samples trained are those of your microbatches that every stage
            counted; serving is what your peer claimed, capped by what trainers
            received from it.
          </p>
        </>
      )}
    </main>
  );
}
