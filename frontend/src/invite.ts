// Links admins hand out: an invitation (a new account) or a password reset, both #/invite/<token>.

/** The full address of a link, on the dashboard the admin is looking at. */
export function invitationUrl(where: { origin: string; pathname: string }, token: string): string {
  return `${where.origin}${where.pathname}#/invite/${encodeURIComponent(token)}`;
}

/** "in 3 days", "in 5 hours", "in 12 minutes": how long a link has left, coarsely. */
export function expiresIn(expiresAt: string, now: number): string {
  const minutes = Math.max(0, Math.round((Date.parse(expiresAt) - now) / 60_000));
  if (minutes >= 2 * 24 * 60) return `in ${Math.round(minutes / (24 * 60))} days`;
  if (minutes >= 2 * 60) return `in ${Math.round(minutes / 60)} hours`;
  return `in ${minutes} minute${minutes === 1 ? "" : "s"}`;
}
