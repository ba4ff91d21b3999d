// The contribution ledger's pure parts: the leaderboard's columns, its ordering and shares, and
// the participant's own page link.
import type {
  ParticipantContribution,
  PeerContribution,
} from "./generated/api";

export type Contribution = ParticipantContribution | PeerContribution;

export type LedgerColumn =
  | "samples_trained"
  | "samples_served"
  | "calls_served"
  | "compute_s"
  | "bytes_moved"
  | "uptime_s"
  | "failures";

export const LEDGER_COLUMNS: {
  key: LedgerColumn;
  label: string;
  title: string;
}[] = [
  {
    key: "samples_trained",
    label: "Samples trained",
    title: "Samples of its microbatches that every stage counted",
  },
  {
    key: "samples_served",
    label: "Samples served",
    title: "Stage-call samples it served, as trainers received them",
  },
  {
    key: "calls_served",
    label: "Calls served",
    title: "Stage calls it served that trainers reported",
  },
  {
    key: "compute_s",
    label: "Compute",
    title: "Compute time of the calls it served",
  },
  {
    key: "bytes_moved",
    label: "Bytes moved",
    title: "Data-plane bytes it moved as a trainer",
  },
  {
    key: "uptime_s",
    label: "Uptime",
    title: "Time connected while steps were taken",
  },
  {
    key: "failures",
    label: "Failures",
    title: "Microbatches it did not finish, and times it was lost",
  },
];

/** What the board ranks by when no column is picked: samples trained and served together. */
export function work(c: Contribution): number {
  return c.samples_trained + c.samples_served;
}

/** Rows ordered by `column` (null: by work), most first; failures fewest first. Ties by name. */
export function rankBy<T extends Contribution>(
  rows: readonly T[],
  column: LedgerColumn | null,
): T[] {
  const value = (c: Contribution) => (column === null ? work(c) : c[column]);
  const direction = column === "failures" ? 1 : -1;
  return [...rows].sort(
    (a, b) =>
      direction * (value(a) - value(b)) ||
      a.participant.localeCompare(b.participant),
  );
}

/** A row's share of the run's counted samples, as a whole percentage ("—" before any step). */
export function shareOfCounted(
  samplesTrained: number,
  counted: number,
): string {
  if (counted <= 0) return "—";
  return `${Math.round((100 * samplesTrained) / counted)}%`;
}

/** The page a peer prints for its participant (`peer/registration.py` builds the same). */
export function contributionPath(token: string): string {
  return `/contribution/${token}`;
}
