import type { PeerOut } from "../generated/feed";
import { formatAgo, formatNumber, linkRows } from "../format";
import { VerifierBadge } from "./JoinPanel";

const GONE = new Set(["left", "kicked", "banned"]);

export interface SwarmViewProps {
  numStages: number;
  peers: PeerOut[];
  /** Peer ids whose stage changed recently (a rebalancing move in progress). */
  moving: Set<number>;
  showDeparted: boolean;
}

/** The data-plane rates a peer measured to others (its last heartbeat), fastest first. */
function PeerLinks({ links, names }: { links: Record<string, number>; names: Map<number, string> }) {
  const rows = linkRows(links, names);
  if (rows.length === 0) return null;
  return (
    <ul className="peer-links" data-testid="peer-links" title="measured data-plane rate to each peer">
      {rows.map((row) => (
        <li key={row.peerId} data-link-to={row.peerId}>
          → {row.name}: {row.rate}
        </li>
      ))}
    </ul>
  );
}

function PeerCard({ peer, moving, names }: { peer: PeerOut; moving: boolean; names: Map<number, string> }) {
  const classes = ["peer", `peer-${peer.state}`];
  if (moving) classes.push("peer-moving");
  return (
    <li className={classes.join(" ")} data-testid="peer" data-peer-id={peer.id} data-state={peer.state}>
      <div className="peer-head">
        <strong>{peer.name || `peer ${peer.id}`}</strong>
        <span className={`badge badge-${peer.state}`}>{peer.state}</span>
        {moving && <span className="badge badge-moving">moving</span>}
        {peer.trusted && <VerifierBadge />}
        {peer.reachable === false && (
          <span
            className="badge badge-trainer-only"
            data-testid="trainer-only"
            title="The coordinator could not reach this peer's data plane where it announced it: it trains but serves no stage."
          >
            trains only
          </span>
        )}
      </div>
      <div className="peer-device" title={peer.device_name}>
        {peer.device}
        {peer.device_name && peer.device_name !== peer.device ? ` · ${peer.device_name}` : ""}
      </div>
      <div className="peer-stats">
        <span title="measured throughput">{formatNumber(peer.throughput, 1)} samples/s</span>
        <span title="queued calls">queue {peer.queue_length}</span>
      </div>
      <PeerLinks links={peer.link_rates} names={names} />
      <div className="peer-heartbeat muted">heartbeat {formatAgo(peer.last_heartbeat)}</div>
    </li>
  );
}

/** Stages as columns, the peers serving each stage inside, with the stage's summed throughput. */
export function SwarmView({ numStages, peers, moving, showDeparted }: SwarmViewProps) {
  const visible = peers.filter((p) => showDeparted || !GONE.has(p.state));
  const names = new Map(peers.map((p) => [p.id, p.name]));
  const columns: { key: string; title: string; peers: PeerOut[] }[] = [];
  for (let s = 0; s < numStages; s++) {
    columns.push({ key: String(s), title: `Stage ${s}`, peers: visible.filter((p) => p.stage === s) });
  }
  const unassigned = visible.filter((p) => p.stage === null || p.stage >= numStages);
  if (unassigned.length > 0) columns.push({ key: "none", title: "Unassigned", peers: unassigned });

  return (
    <div className="swarm" data-testid="swarm">
      {columns.map((column) => {
        const live = column.peers.filter((p) => p.state === "active");
        const rate = live.reduce((sum, p) => sum + p.throughput, 0);
        return (
          <div className="stage" key={column.key} data-testid={`stage-${column.key}`}>
            <div className="stage-head">
              <h3>{column.title}</h3>
              <span className="muted">
                {live.length} live · {formatNumber(rate, 1)} samples/s
              </span>
            </div>
            {column.peers.length === 0 && <p className="muted empty">no peers</p>}
            <ul>
              {column.peers.map((peer) => (
                <PeerCard key={peer.id} peer={peer} moving={moving.has(peer.id)} names={names} />
              ))}
            </ul>
          </div>
        );
      })}
    </div>
  );
}
