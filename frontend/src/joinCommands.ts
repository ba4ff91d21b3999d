// Join commands this browser was shown, so that the owner can show a token's command again: the
// coordinator keeps only each token's hash and cannot. Kept per run in localStorage (see JoinPanel).

/** Token id -> the join command shown when it was issued. */
export type RememberedCommands = Readonly<Record<string, string>>;

export const storageKey = (runId: number) => `swarmhub.join-commands.${runId}`;

/** What a stored value holds; anything malformed reads as nothing remembered. */
export function parseRemembered(raw: string | null): RememberedCommands {
  if (!raw) return {};
  try {
    const value: unknown = JSON.parse(raw);
    if (typeof value !== "object" || value === null || Array.isArray(value)) return {};
    return Object.fromEntries(
      Object.entries(value as Record<string, unknown>).filter(
        (entry): entry is [string, string] => /^\d+$/.test(entry[0]) && typeof entry[1] === "string",
      ),
    );
  } catch {
    return {};
  }
}

export function remember(commands: RememberedCommands, tokenId: number, command: string): RememberedCommands {
  return { ...commands, [String(tokenId)]: command };
}

/** Only the tokens still active: a revoked token's command is of no use and is not kept. */
export function keepActive(commands: RememberedCommands, activeIds: readonly number[]): RememberedCommands {
  const active = new Set(activeIds.map(String));
  return Object.fromEntries(Object.entries(commands).filter(([id]) => active.has(id)));
}

export function recall(commands: RememberedCommands, tokenId: number): string | null {
  return commands[String(tokenId)] ?? null;
}
