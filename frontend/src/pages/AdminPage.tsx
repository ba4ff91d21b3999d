import { Fragment, useCallback, useEffect, useState } from "react";
import { api, errorMessage } from "../api";
import { StatusBadge } from "../components/StatusBadge";
import type { PeerOut, RunOut } from "../feed-types";
import { formatAgo, formatNumber, formatTime } from "../format";
import type { TokenOut } from "../types";

const REFRESH_MS = 5000;

function RunTokens({ runId }: { runId: number }) {
  const [tokens, setTokens] = useState<TokenOut[] | null>(null);
  const [error, setError] = useState("");
  const load = useCallback(() => {
    api
      .get<TokenOut[]>(`/api/runs/${runId}/tokens`)
      .then(setTokens)
      .catch((e) => setError(errorMessage(e)));
  }, [runId]);
  useEffect(load, [load]);

  async function revoke(id: number) {
    try {
      await api.del(`/api/runs/${runId}/tokens/${id}`);
      load();
    } catch (e) {
      setError(errorMessage(e));
    }
  }

  if (error) return <p className="error">{error}</p>;
  if (tokens === null) return <p className="muted">Loading tokens…</p>;
  if (tokens.length === 0) return <p className="muted">No tokens issued.</p>;
  return (
    <ul className="token-list" data-testid={`tokens-${runId}`}>
      {tokens.map((t) => (
        <li key={t.id}>
          token #{t.id}
          {t.label ? ` ${t.label}` : ""} · issued {formatTime(t.created_at)}
          {t.revoked_at ? (
            <span className="muted"> · revoked {formatTime(t.revoked_at)}</span>
          ) : (
            <button type="button" className="danger small" onClick={() => void revoke(t.id)}>
              Revoke
            </button>
          )}
        </li>
      ))}
    </ul>
  );
}

export function AdminPage() {
  const [runs, setRuns] = useState<RunOut[]>([]);
  const [peers, setPeers] = useState<PeerOut[]>([]);
  const [openRun, setOpenRun] = useState<number | null>(null);
  const [showDeparted, setShowDeparted] = useState(false);
  const [error, setError] = useState("");
  const [notice, setNotice] = useState("");

  const load = useCallback(async () => {
    try {
      const [r, p] = await Promise.all([
        api.get<RunOut[]>("/api/runs"),
        api.get<PeerOut[]>("/api/admin/peers"),
      ]);
      setRuns(r);
      setPeers(p);
      setError("");
    } catch (e) {
      setError(errorMessage(e));
    }
  }, []);

  useEffect(() => {
    void load();
    const timer = window.setInterval(() => void load(), REFRESH_MS);
    return () => window.clearInterval(timer);
  }, [load]);

  async function act(peer: PeerOut, action: "kick" | "ban") {
    const what = action === "ban" ? "Ban" : "Kick";
    if (action === "ban" && !window.confirm(`Ban peer ${peer.name || peer.id}? It cannot rejoin.`)) return;
    try {
      await api.post(`/api/peers/${peer.id}/${action}`, { reason: `${action} by admin` });
      setNotice(`${what} sent to peer ${peer.name || peer.id}.`);
      await load();
    } catch (e) {
      setError(errorMessage(e));
    }
  }

  const runName = new Map(runs.map((r) => [r.id, r.name]));
  const visiblePeers = peers.filter(
    (p) => showDeparted || !["left", "kicked", "banned"].includes(p.state),
  );

  return (
    <section>
      <h1>Admin</h1>
      {error && <p className="error">{error}</p>}
      {notice && (
        <p className="notice" role="status">
          {notice}
        </p>
      )}

      <div className="card">
        <h2>Runs</h2>
        <table className="table" data-testid="admin-runs">
          <thead>
            <tr>
              <th>Run</th>
              <th>Owner</th>
              <th>Status</th>
              <th>Step</th>
              <th>Peers</th>
              <th>Join tokens</th>
            </tr>
          </thead>
          <tbody>
            {runs.map((run) => (
              <Fragment key={run.id}>
                <tr>
                  <td>
                    <a href={`#/runs/${run.id}`}>{run.name}</a>
                  </td>
                  <td>user #{run.owner_id}</td>
                  <td>
                    <StatusBadge status={run.status} />
                  </td>
                  <td>{run.current_step}</td>
                  <td>
                    {peers.filter((p) => p.run_id === run.id && p.state === "active").length}
                    <span className="muted"> / {peers.filter((p) => p.run_id === run.id).length}</span>
                  </td>
                  <td>
                    <button
                      type="button"
                      className="link"
                      onClick={() => setOpenRun(openRun === run.id ? null : run.id)}
                    >
                      {openRun === run.id ? "hide" : "show"}
                    </button>
                  </td>
                </tr>
                {openRun === run.id && (
                  <tr className="subrow">
                    <td colSpan={6}>
                      <RunTokens runId={run.id} />
                    </td>
                  </tr>
                )}
              </Fragment>
            ))}
          </tbody>
        </table>
      </div>

      <div className="card">
        <div className="card-head">
          <h2>Peers</h2>
          <label className="inline">
            <input type="checkbox" checked={showDeparted} onChange={(e) => setShowDeparted(e.target.checked)} />
            show departed peers
          </label>
        </div>
        {visiblePeers.length === 0 && <p className="muted">No peers.</p>}
        {visiblePeers.length > 0 && (
          <table className="table" data-testid="admin-peers">
            <thead>
              <tr>
                <th>Peer</th>
                <th>Run</th>
                <th>Stage</th>
                <th>State</th>
                <th>Device</th>
                <th>Samples/s</th>
                <th>Address</th>
                <th>Last heartbeat</th>
                <th />
              </tr>
            </thead>
            <tbody>
              {visiblePeers.map((peer) => (
                <tr key={peer.id} data-testid="admin-peer" data-peer-id={peer.id} data-state={peer.state}>
                  <td>{peer.name || `peer ${peer.id}`}</td>
                  <td>{runName.get(peer.run_id) ?? `#${peer.run_id}`}</td>
                  <td>{peer.stage ?? "—"}</td>
                  <td>
                    <span className={`badge badge-${peer.state}`}>{peer.state}</span>
                  </td>
                  <td title={peer.device_name}>{peer.device}</td>
                  <td>{formatNumber(peer.throughput, 1)}</td>
                  <td>
                    <code>{peer.address}</code>
                  </td>
                  <td title={peer.last_heartbeat ?? ""}>{formatAgo(peer.last_heartbeat)}</td>
                  <td>
                    <div className="row-actions">
                    {!["kicked", "banned", "left"].includes(peer.state) && (
                      <button type="button" className="secondary small" onClick={() => void act(peer, "kick")}>
                        Kick
                      </button>
                    )}
                    {peer.state !== "banned" && (
                      <button type="button" className="danger small" onClick={() => void act(peer, "ban")}>
                        Ban
                      </button>
                    )}
                    </div>
                  </td>
                </tr>
              ))}
            </tbody>
          </table>
        )}
      </div>
    </section>
  );
}
