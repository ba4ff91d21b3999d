// Run comparison: the settings of several runs side by side, those that differ first.
import { RUN_SETTINGS } from "./generated/run-settings";

export type SettingValue = string | number | boolean | null;

export interface SettingRow {
  name: string;
  values: SettingValue[];
  differs: boolean;
}

export const SETTING_NAMES: readonly string[] = Object.keys(RUN_SETTINGS).filter((name) => name !== "name");

/** One row per setting in `names` (by default every run setting but the name), the differing ones
 * first, each group in the settings' own order. A missing value reads as null. */
export function diffSettings(
  runs: readonly Record<string, unknown>[],
  names: readonly string[] = SETTING_NAMES,
): SettingRow[] {
  const rows = names.map((name) => {
    const values = runs.map((run) => {
      const value = run[name];
      return value === undefined ? null : (value as SettingValue);
    });
    const differs = values.some((value) => value !== values[0]);
    return { name, values, differs };
  });
  return [...rows.filter((r) => r.differs), ...rows.filter((r) => !r.differs)];
}

/** "?runs=1,2,3" (or a hash's query) -> [1, 2, 3]: positive ids, each once, in the order given. */
export function parseRunIds(query: string): number[] {
  const raw = new URLSearchParams(query.replace(/^[^?]*\?/, "")).get("runs") ?? "";
  const ids = raw
    .split(",")
    .map((part) => part.trim())
    .filter((part) => /^\d+$/.test(part))
    .map(Number)
    .filter((id) => id > 0);
  return [...new Set(ids)];
}
