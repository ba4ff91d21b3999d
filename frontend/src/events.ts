// How an event kind looks in the run page's event log: an icon, a tone (its colour, see
// styles.css `.event.tone-*`) and a label for screen readers. Kinds not listed are plain.

export interface EventStyle {
  icon: string;
  tone: "move" | "ok" | "warn" | "bad" | "save" | "plain";
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
};

const PLAIN: Omit<EventStyle, "label"> = { icon: "•", tone: "plain" };

export function eventStyle(kind: string): EventStyle {
  return EVENT_STYLES[kind] ?? { ...PLAIN, label: kind };
}
