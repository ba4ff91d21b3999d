import { useEffect, useState } from "react";
import type { PeerOut, RunHealthOut } from "../generated/feed";
import { formatAgo, formatNumber, linkRows } from "../format";
import { stageHealth } from "../health";
import type { StageRate } from "../stageRates";
import { VerifierBadge } from "./JoinPanel";

const GONE = new Set(["left", "kicked", "banned"]);

export interface SwarmViewProps {
  numStages: number;
  peers: PeerOut[];
  /** Peer ids whose stage changed recently (a rebalancing move in progress). */
  moving: Set<number>;
  showDeparted: boolean;
  /** Each stage's observed served rate and its peers' claims (stageRates). */
  rates: StageRate[];
  bottleneck: number | null;
  /** The coordinator's view of each stage (green/amber/red from live peers and rate). */
  health?: RunHealthOut | null;
}

const CLOCK_MS = 2_000;

/** The time now, renewed every couple of seconds: "heartbeat Ns ago" must age even when no frame comes. */
function useNow(): number {
  const [now, setNow] = useState(Date.now());
  useEffect(() => {
    const timer = window.setInterval(() => setNow(Date.now()), CLOCK_MS);
    return () => window.clearInterval(timer);
  }, []);
  return now;
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

function PeerCard({
  peer,
  moving,
  names,
  now,
}: {
  peer: PeerOut;
  moving: boolean;
  names: Map<number, string>;
  now: number;
}) {
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
        <span title="the rate this peer claims from its own benchmark">
          claims {formatNumber(peer.throughput, 1)} samples/s
        </span>
        <span title="queued calls">queue {peer.queue_length}</span>
      </div>
      <PeerLinks links={peer.link_rates} names={names} />
      <div className="peer-heartbeat muted" data-testid="peer-heartbeat">
        heartbeat {formatAgo(peer.last_heartbeat, now)}
      </div>
    </li>
  );
}

/** Stages as columns, the peers serving each stage inside; each stage's head gives what it served over
 * the recent steps (observed, never more than the run did) next to what its peers claim, and marks
 * the bottleneck: the stage working nearest its capacity. */
export function SwarmView({ numStages, peers, moving, showDeparted, rates, bottleneck, health }: SwarmViewProps) {
  const now = useNow();
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
        const rate = rates.find((r) => String(r.stage) === column.key);
        const isBottleneck = bottleneck !== null && String(bottleneck) === column.key;
        const stage = column.key === "none" ? null : stageHealth(health, Number(column.key));
        return (
          <div
            className={isBottleneck ? "stage stage-bottleneck" : "stage"}
            key={column.key}
            data-testid={`stage-${column.key}`}
            data-bottleneck={isBottleneck ? "true" : undefined}
          >
            <div className="stage-head">
              <h3>
                {stage && (
                  <span
                    className={`health-dot health-dot-${stage.color}`}
                    data-testid="stage-health"
                    data-color={stage.color}
                    title={stage.reason}
                    aria-label={`${stage.color}: ${stage.reason}`}
                  />
                )}
                {column.title}
                {isBottleneck && (
                  <span
                    className="badge badge-bottleneck"
                    data-testid="bottleneck"
                    title="the stage working nearest its capacity: it sets the run's pace"
                  >
                    bottleneck
                  </span>
                )}
              </h3>
              <span className="muted" data-testid="stage-rate">
                {live.length} live
                {rate && (
                  <>
                    {" "}
                    · served {formatNumber(rate.served, 1)} samples/s · claims {formatNumber(rate.claimed, 1)}
                  </>
                )}
              </span>
            </div>
            {column.peers.length === 0 && <p className="muted empty">no peers</p>}
            <ul>
              {column.peers.map((peer) => (
                <PeerCard key={peer.id} peer={peer} moving={moving.has(peer.id)} names={names} now={now} />
              ))}
            </ul>
          </div>
        );
      })}
    </div>
  );
}
