// Pure parts of the webhooks panel: the kinds an owner picks from, a URL check before sending,
// and one line saying where a delivery stands.
import type { DeliveryOut, WebhookCreate } from "./generated/api";

export type WebhookKind = NonNullable<WebhookCreate["kinds"]>[number];

export const WEBHOOK_KINDS: { kind: WebhookKind; label: string }[] = [
  { kind: "run_stalled", label: "stalled" },
  { kind: "run_recovered", label: "recovered" },
  { kind: "run_finished", label: "finished" },
  { kind: "checkpoint", label: "checkpoint" },
];

/** Why the coordinator would refuse this URL, or null; the coordinator checks again (422). */
export function webhookUrlProblem(url: string): string | null {
  const text = url.trim();
  if (!text) return "Enter the URL the coordinator should POST to.";
  let parsed: URL;
  try {
    parsed = new URL(text);
  } catch {
    return "Not a URL: write it in full, e.g. https://alerts.example.com/swarmhub.";
  }
  if (parsed.protocol !== "http:" && parsed.protocol !== "https:") return "Only http:// and https:// URLs.";
  if (!parsed.hostname) return "The URL needs a host.";
  if (text.length > 2000) return "At most 2000 characters.";
  return null;
}

export interface DeliveryStatus {
  text: string;
  tone: "ok" | "pending" | "bad" | "muted";
}

function lastFailure(d: DeliveryOut): string {
  return d.error || (d.status_code !== null ? `HTTP ${d.status_code}` : "no answer");
}

function secondsUntil(iso: string, now: number): number {
  return Math.max(0, Math.round((new Date(iso).getTime() - now) / 1000));
}

/** One line for the delivery log: delivered, sending, retrying when, given up, or cancelled. */
export function deliveryStatus(d: DeliveryOut, now = Date.now()): DeliveryStatus {
  const attempts = `${d.attempts} attempt${d.attempts === 1 ? "" : "s"}`;
  switch (d.state) {
    case "delivered":
      return { text: `delivered (HTTP ${d.status_code}, ${attempts})`, tone: "ok" };
    case "failed":
      return { text: `gave up after ${attempts}: ${lastFailure(d)}`, tone: "bad" };
    case "cancelled":
      return { text: `cancelled after ${attempts}`, tone: "muted" };
    case "pending":
      if (d.attempts === 0) return { text: "sending…", tone: "pending" };
      if (d.next_attempt_at === null) return { text: `${attempts} failed: ${lastFailure(d)}`, tone: "pending" };
      return {
        text: `${attempts} failed (${lastFailure(d)}); next try in ${secondsUntil(d.next_attempt_at, now)}s`,
        tone: "pending",
      };
  }
}

/** Whether events of this kind may be sent to webhooks (a new one reloads the delivery log). */
export function isWebhookKind(kind: string): boolean {
  return WEBHOOK_KINDS.some((k) => k.kind === kind);
}
