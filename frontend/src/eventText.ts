// Event messages in human units. New messages are written that way by the coordinator
// (swarmhub/units.py); this rewrites older stored ones the same way: "3012000 bytes" -> "3.0 MB",
// "{1: 32, 2: 8}" -> "stage 1: 32, stage 2: 8".

const UNITS = ["B", "kB", "MB", "GB", "TB", "PB"];

/** Decimal (SI) units like the coordinator's messages: 3012000 -> "3.0 MB". */
export function formatBytesSI(count: number): string {
  if (!Number.isFinite(count)) return "—";
  let value = count;
  let unit = 0;
  while (Math.abs(value) >= 999.95 && unit < UNITS.length - 1) {
    value /= 1000;
    unit++;
  }
  return unit === 0 ? `${Math.trunc(count)} B` : `${value.toFixed(1)} ${UNITS[unit]}`;
}

const RAW_BYTES = /\b(\d+) bytes\b/g;
const STAGE_DICT = /\{(\s*\d+\s*:\s*\d+\s*(?:,\s*\d+\s*:\s*\d+\s*)*)\}/g;

export function humanizeMessage(message: string): string {
  return message
    .replace(RAW_BYTES, (_m, digits: string) => formatBytesSI(Number(digits)))
    .replace(STAGE_DICT, (_m, body: string) =>
      body
        .split(",")
        .map((pair) => pair.split(":").map((part) => part.trim()))
        .map(([stage, count]) => `stage ${stage}: ${count}`)
        .join(", "),
    );
}
