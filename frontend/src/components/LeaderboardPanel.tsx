// The run's contribution ledger as a leaderboard: each participant (join token) or each peer, with
// what it is credited over the recorded steps, sortable by any column, and the CSV export.
import { useState } from "react";
import { call, client } from "../api";
import { formatBytes, formatCount, formatSeconds } from "../format";
import type { PeerContribution } from "../generated/api";
import { useLoad } from "../hooks/useLoad";
import {
  LEDGER_COLUMNS,
  rankBy,
  shareOfCounted,
  type Contribution,
  type LedgerColumn,
} from "../ledger";

function cell(row: Contribution, column: LedgerColumn): string {
  switch (column) {
    case "compute_s":
    case "uptime_s":
      return formatSeconds(row[column]);
    case "bytes_moved":
      return formatBytes(row[column]);
    default:
      return formatCount(row[column]);
  }
}

/** `refreshKey` changes with every committed step; the ledger reloads. */
export function LeaderboardPanel({
  runId,
  refreshKey,
}: {
  runId: number;
  refreshKey: number;
}) {
  const { data: ledger, error } = useLoad(
    () =>
      call(
        client.GET("/api/runs/{run_id}/ledger", {
          params: { path: { run_id: runId } },
        }),
      ),
    [runId, refreshKey],
  );
  const [byPeer, setByPeer] = useState(false);
  const [column, setColumn] = useState<LedgerColumn | null>(null);
  const shown: readonly Contribution[] = ledger
    ? byPeer
      ? ledger.peers
      : ledger.participants
    : [];
  const rows = rankBy(shown, column);

  return (
    <div data-testid="leaderboard">
      <div className="card-head">
        <h2>Leaderboard</h2>
        <div className="head-actions">
          <label className="inline">
            <input
              type="checkbox"
              checked={byPeer}
              onChange={(e) => setByPeer(e.target.checked)}
            />
            per peer
          </label>
          <a
            className="button secondary small"
            href={`/api/runs/${runId}/ledger.csv`}
            download
          >
            Export CSV
          </a>
        </div>
      </div>
      {error && <p className="error">{error}</p>}
      {ledger && rows.length === 0 && (
        <p className="muted">No peer has joined yet.</p>
      )}
      {ledger && rows.length > 0 && (
        <div className="table-scroll">
          <table className="table compact" data-testid="leaderboard-table">
            <thead>
              <tr>
                <th>#</th>
                <th>{byPeer ? "Peer" : "Participant"}</th>
                {LEDGER_COLUMNS.map((c) => (
                  <th key={c.key} title={c.title}>
                    <button
                      type="button"
                      className="link"
                      aria-pressed={column === c.key}
                      onClick={() => setColumn(column === c.key ? null : c.key)}
                    >
                      {c.label}
                      {column === c.key ? " ▾" : ""}
                    </button>
                  </th>
                ))}
                <th title="Share of the samples every stage counted">Share</th>
              </tr>
            </thead>
            <tbody>
              {rows.map((row, index) => {
                const peer = byPeer ? (row as PeerContribution) : null;
                return (
                  <tr
                    key={
                      peer
                        ? `p${peer.peer_id}`
                        : `t${row.participant_id ?? "none"}`
                    }
                    data-testid="leaderboard-row"
                  >
                    <td>{index + 1}</td>
                    <td>
                      {peer ? (
                        <>
                          {peer.peer_name}{" "}
                          <span className="muted">
                            ({peer.participant}, {peer.state})
                          </span>
                        </>
                      ) : (
                        <>
                          {row.participant}{" "}
                          <span className="muted">
                            ({"peers" in row ? row.peers : 1} peer
                            {"peers" in row && row.peers === 1 ? "" : "s"})
                          </span>
                        </>
                      )}
                    </td>
                    {LEDGER_COLUMNS.map((c) => (
                      <td key={c.key}>{cell(row, c.key)}</td>
                    ))}
                    <td>
                      {shareOfCounted(
                        row.samples_trained,
                        ledger.samples_counted,
                      )}
                    </td>
                  </tr>
                );
              })}
            </tbody>
          </table>
        </div>
      )}
      {ledger && (
        <p className="muted">
          Over the recorded steps ({formatCount(ledger.samples_counted)} samples
          counted on every stage). Serving is what a peer claimed, capped by
          what trainers received from it.
        </p>
      )}
    </div>
  );
}
