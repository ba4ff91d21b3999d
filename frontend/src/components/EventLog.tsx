import type { EventOut } from "../generated/feed";
import { eventStyle } from "../events";
import { formatTime } from "../format";

export function EventLog({ events }: { events: EventOut[] }) {
  return (
    <div className="event-log" data-testid="event-log">
      {events.length === 0 && <p className="muted">No events yet.</p>}
      <ul>
        {events.map((event) => {
          const style = eventStyle(event.kind);
          return (
            <li
              key={event.id}
              className={`event event-${event.kind} tone-${style.tone}`}
              data-testid="event"
              data-kind={event.kind}
            >
              <span className="event-icon" aria-label={style.label} title={style.label}>
                {style.icon}
              </span>
              <time>{formatTime(event.created_at)}</time>
              <span className="event-kind">{event.kind}</span>
              <span className="event-message">{event.message}</span>
            </li>
          );
        })}
      </ul>
    </div>
  );
}
