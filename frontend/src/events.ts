// How an event kind looks in the run page's event log: an icon, a tone (its colour, see
// styles.css `.event.tone-*`) and a label for screen readers. Kinds not listed are plain.

export interface EventStyle {
  icon: string;
  /** "fault": a peer caught computing wrong results, louder than "bad" (a peer merely gone). */
  tone: "move" | "ok" | "warn" | "bad" | "fault" | "save" | "plain";
  label: string;
}

export const EVENT_STYLES: Record<string, EventStyle> = {
  rebalance: { icon: "⇄", tone: "move", label: "peer moved to the bottleneck stage" },
  stage_restored: { icon: "↺", tone: "ok", label: "stage restored from a checkpoint" },
  stage_reinitialized: { icon: "⚠", tone: "warn", label: "stage restarted from scratch" },
  samples_lost: { icon: "✖", tone: "bad", label: "samples lost with a peer" },
  checkpoint: { icon: "▣", tone: "save", label: "checkpoint complete" },
  checkpoint_requested: { icon: "▢", tone: "plain", label: "checkpoint requested" },
  peer_lost: { icon: "✖", tone: "bad", label: "peer lost" },
  run_finished: { icon: "✔", tone: "ok", label: "run finished" },
  spot_check_mismatch: { icon: "≠", tone: "warn", label: "spot check: two peers disagree, a third referees" },
  peer_faulty: { icon: "⛔", tone: "fault", label: "peer banned for returning wrong results" },
  contribution_rejected: { icon: "⊖", tone: "warn", label: "gradient out of proportion to its samples: left out of the step" },
  spot_check_unfounded: { icon: "=", tone: "ok", label: "spot check: the referee found both results right" },
  spot_check_referee: { icon: "⚖", tone: "plain", label: "trusted verifier brought in to referee a spot check" },
  spot_check_unresolved: { icon: "?", tone: "warn", label: "spot check left unsettled" },
  peer_banned: { icon: "⊘", tone: "bad", label: "peer banned" },
  run_stalled: { icon: "⏸", tone: "bad", label: "run stalled: nothing trains" },
  run_recovered: { icon: "▶", tone: "ok", label: "run training again" },
};

const PLAIN: Omit<EventStyle, "label"> = { icon: "•", tone: "plain" };

export function eventStyle(kind: string): EventStyle {
  return EVENT_STYLES[kind] ?? { ...PLAIN, label: kind };
}
