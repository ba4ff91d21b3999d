export function formatCount(n: number | null | undefined): string {
  if (n === null || n === undefined || !Number.isFinite(n)) return "—";
  const abs = Math.abs(n);
  if (abs >= 1e9) return `${(n / 1e9).toFixed(2)}B`;
  if (abs >= 1e6) return `${(n / 1e6).toFixed(2)}M`;
  if (abs >= 1e3) return `${(n / 1e3).toFixed(1)}k`;
  return String(n);
}

export function formatNumber(n: number | null | undefined, digits = 3): string {
  if (n === null || n === undefined || !Number.isFinite(n)) return "—";
  return n.toFixed(digits);
}

export function formatTime(iso: string | null | undefined): string {
  if (!iso) return "—";
  const date = new Date(iso);
  return Number.isNaN(date.getTime()) ? iso : date.toLocaleTimeString();
}

export function formatAgo(iso: string | null | undefined, now = Date.now()): string {
  if (!iso) return "never";
  const t = new Date(iso).getTime();
  if (Number.isNaN(t)) return iso;
  const s = Math.max(0, Math.round((now - t) / 1000));
  if (s < 60) return `${s}s ago`;
  if (s < 3600) return `${Math.floor(s / 60)}m ago`;
  return `${Math.floor(s / 3600)}h ago`;
}

export function formatBytes(n: number | null | undefined): string {
  if (n === null || n === undefined || !Number.isFinite(n)) return "—";
  const units = ["B", "KiB", "MiB", "GiB", "TiB"];
  let value = n;
  let unit = 0;
  while (Math.abs(value) >= 1024 && unit < units.length - 1) {
    value /= 1024;
    unit++;
  }
  return unit === 0 ? `${value} B` : `${value.toFixed(value < 10 ? 2 : 1)} ${units[unit]}`;
}

/** A fraction as the percentage shown, without float noise (0.07 -> "7", not "7.000000000000001"). */
export function percentOf(fraction: number): string {
  return String(Number((fraction * 100).toPrecision(12)));
}

/** Seconds of work in human units: milliseconds below one second, then seconds, minutes, hours. */
export function formatSeconds(s: number | null | undefined): string {
  if (s === null || s === undefined || !Number.isFinite(s)) return "—";
  if (s === 0) return "0 s";
  if (Math.abs(s) < 1) return `${Number((s * 1000).toPrecision(3))} ms`;
  if (Math.abs(s) < 60) return `${s.toFixed(1)} s`;
  const m = Math.floor(s / 60);
  if (m < 60) return `${m} min ${Math.floor(s % 60)} s`;
  return `${Math.floor(m / 60)} h ${m % 60} min`;
}

export interface LinkRow {
  peerId: number;
  name: string;
  rate: string;
}

/** A peer's measured link rates (peer id -> bytes/s) as rows, fastest first, named where known. */
export function linkRows(links: Record<string, number>, names: Map<number, string>): LinkRow[] {
  return Object.entries(links)
    .map(([id, rate]) => ({ id: Number(id), rate }))
    .sort((a, b) => b.rate - a.rate || a.id - b.id)
    .map(({ id, rate }) => ({ peerId: id, name: names.get(id) || `peer ${id}`, rate: `${formatBytes(rate)}/s` }));
}
