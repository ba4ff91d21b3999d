// The dashboard's live feed: one websocket per open run page. On every (re)connection the server
// sends a `snapshot` first, which replaces the page's state, so nothing missed while
// disconnected is lost. Reconnects back off exponentially (capped, with jitter).

import type { FeedFrame } from "./generated/feed";

export type FeedStatus = "connecting" | "live" | "reconnecting" | "closed";

export interface FeedOptions {
  onFrame: (frame: FeedFrame) => void;
  onStatus?: (status: FeedStatus, retryInMs?: number) => void;
  baseDelayMs?: number;
  maxDelayMs?: number;
}

export function feedUrl(runId: number): string {
  const scheme = window.location.protocol === "https:" ? "wss:" : "ws:";
  return `${scheme}//${window.location.host}/ws/runs/${runId}/feed`;
}

/** Delay before reconnect attempt `attempt` (0-based): base * 2^attempt, capped, +-20% jitter. */
export function backoffDelay(attempt: number, baseMs: number, maxMs: number): number {
  const raw = Math.min(maxMs, baseMs * 2 ** Math.min(attempt, 30));
  return Math.round(raw * (0.8 + Math.random() * 0.4));
}

// Close codes after which retrying cannot help (policy violation / not allowed).
const FATAL_CLOSE_CODES = new Set([1008, 4401, 4403, 4404]);

export class FeedClient {
  private socket: WebSocket | null = null;
  private attempt = 0;
  private timer: number | undefined;
  private stopped = false;
  private readonly url: string;
  private readonly options: FeedOptions;

  constructor(url: string, options: FeedOptions) {
    this.url = url;
    this.options = options;
  }

  start(): void {
    this.stopped = false;
    this.open();
  }

  stop(): void {
    this.stopped = true;
    window.clearTimeout(this.timer);
    const socket = this.socket;
    this.socket = null;
    if (socket) {
      socket.onclose = null;
      socket.onmessage = null;
      socket.onerror = null;
      socket.close(1000);
    }
    this.options.onStatus?.("closed");
  }

  private open(): void {
    this.options.onStatus?.(this.attempt === 0 ? "connecting" : "reconnecting");
    const socket = new WebSocket(this.url);
    this.socket = socket;
    socket.onmessage = (message) => {
      let frame: FeedFrame;
      try {
        frame = JSON.parse(String(message.data)) as FeedFrame;
      } catch {
        return;
      }
      if (frame.type === "snapshot") {
        this.attempt = 0;
        this.options.onStatus?.("live");
      }
      this.options.onFrame(frame);
    };
    socket.onclose = (event) => {
      if (this.socket !== socket || this.stopped) return;
      this.socket = null;
      if (FATAL_CLOSE_CODES.has(event.code)) {
        this.options.onStatus?.("closed");
        return;
      }
      this.scheduleReconnect();
    };
    socket.onerror = () => {
      // onclose follows and schedules the retry.
    };
  }

  private scheduleReconnect(): void {
    const delay = backoffDelay(
      this.attempt,
      this.options.baseDelayMs ?? 500,
      this.options.maxDelayMs ?? 30_000,
    );
    this.attempt += 1;
    this.options.onStatus?.("reconnecting", delay);
    this.timer = window.setTimeout(() => this.open(), delay);
  }
}
