import type { RunHealthOut } from "../generated/feed";
import { formatTime } from "../format";
import { bannerText, healthLabel } from "../health";

/** Says what is happening when the run is not training: paused, stalled and why, waiting, finished. */
export function HealthBanner({ health }: { health: RunHealthOut | null | undefined }) {
  const text = bannerText(health, formatTime);
  if (!health || text === null) return null;
  return (
    <div
      className={`health-banner health-banner-${health.state}`}
      role={health.state === "stalled" ? "alert" : "status"}
      data-testid="health-banner"
      data-state={health.state}
    >
      {text}
    </div>
  );
}

/** The run's health in a word, with the reason on hover (runs list, run page head). */
export function HealthBadge({ health }: { health: RunHealthOut | null | undefined }) {
  if (!health) return null;
  return (
    <span
      className={`badge health-badge health-${health.state}`}
      title={health.reason}
      data-testid="run-health"
      data-state={health.state}
    >
      {healthLabel(health.state)}
    </span>
  );
}
