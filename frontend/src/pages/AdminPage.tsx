import { Fragment, useEffect, useState } from "react";
import { call, client, errorMessage } from "../api";
import { VerifierBadge } from "../components/JoinPanel";
import { StatusBadge } from "../components/StatusBadge";
import { UsersPanel } from "../components/UsersPanel";
import { formatAgo, formatNumber, formatTime } from "../format";
import type { PeerOut, UserOut } from "../generated/api";
import { useLoad } from "../hooks/useLoad";

const REFRESH_MS = 5000;

function revokeToken(runId: number, tokenId: number): Promise<void> {
  return call(
    client.DELETE("/api/runs/{run_id}/tokens/{token_id}", {
      params: { path: { run_id: runId, token_id: tokenId } },
    }),
  );
}

function RunTokens({ runId }: { runId: number }) {
  const loaded = useLoad(
    () => call(client.GET("/api/runs/{run_id}/tokens", { params: { path: { run_id: runId } } })),
    [runId],
  );
  const [actionError, setActionError] = useState("");
  const tokens = loaded.data;
  const error = actionError || loaded.error;

  async function revoke(id: number) {
    try {
      await revokeToken(runId, id);
      loaded.reload();
    } catch (e) {
      setActionError(errorMessage(e));
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
          {t.label ? ` ${t.label}` : ""}
          {t.verifier && <VerifierBadge />} · issued {formatTime(t.created_at)}
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

export function AdminPage({ me }: { me: UserOut }) {
  const loaded = useLoad(() => Promise.all([call(client.GET("/api/runs")), call(client.GET("/api/admin/peers"))]), []);
  const [runs, peers] = loaded.data ?? [[], []];
  const [openRun, setOpenRun] = useState<number | null>(null);
  const [showDeparted, setShowDeparted] = useState(false);
  const [actionError, setActionError] = useState("");
  const [notice, setNotice] = useState("");
  const error = actionError || loaded.error;
  const { reload } = loaded;

  useEffect(() => {
    const timer = window.setInterval(reload, REFRESH_MS);
    return () => window.clearInterval(timer);
  }, [reload]);

  async function act(peer: PeerOut, action: "kick" | "ban") {
    const what = action === "ban" ? "Ban" : "Kick";
    if (action === "ban" && !window.confirm(`Ban peer ${peer.name || peer.id}? It cannot rejoin.`)) return;
    const request = { params: { path: { peer_id: peer.id } }, body: { reason: `${action} by admin` } };
    setActionError("");
    try {
      await call(
        action === "ban"
          ? client.POST("/api/peers/{peer_id}/ban", request)
          : client.POST("/api/peers/{peer_id}/kick", request),
      );
      setNotice(`${what} sent to peer ${peer.name || peer.id}.`);
      reload();
    } catch (e) {
      setActionError(errorMessage(e));
    }
  }

  const runName = new Map(runs.map((r) => [r.id, r.name]));
  const visiblePeers = peers.filter((p) => showDeparted || !["left", "kicked", "banned"].includes(p.state));

  return (
    <section>
      <h1>Admin</h1>
      {error && <p className="error">{error}</p>}
      {notice && (
        <p className="notice" role="status">
          {notice}
        </p>
      )}

      <UsersPanel me={me} />

      <div className="card">
        <h2>Runs</h2>
        <div className="table-scroll">
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
                    <td>{run.owner_name}</td>
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
          <div className="table-scroll">
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
                    <td>
                      {peer.name || `peer ${peer.id}`} {peer.trusted && <VerifierBadge />}
                    </td>
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
          </div>
        )}
      </div>
    </section>
  );
}
