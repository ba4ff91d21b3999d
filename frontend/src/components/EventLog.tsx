import { useMemo, useState } from "react";
import type { EventOut } from "../generated/feed";
import { foldEvents, foldTitle, kindCounts } from "../eventFold";
import { humanizeMessage } from "../eventText";
import { eventStyle } from "../events";
import { formatTime } from "../format";

function EventLine({ event }: { event: EventOut }) {
  const style = eventStyle(event.kind);
  return (
    <li className={`event event-${event.kind} tone-${style.tone}`} data-testid="event" data-kind={event.kind}>
      <span className="event-icon" aria-label={style.label} title={style.label}>
        {style.icon}
      </span>
      <time>{formatTime(event.created_at)}</time>
      <span className="event-kind">{event.kind}</span>
      <span className="event-message">{humanizeMessage(event.message)}</span>
    </li>
  );
}

/** The run's events, newest first: filtered by kind (all kinds when none is chosen), with runs of
 * routine checkpoints folded into one line that opens up. */
export function EventLog({ events }: { events: EventOut[] }) {
  const [shown, setShown] = useState<ReadonlySet<string>>(new Set());
  const kinds = useMemo(() => kindCounts(events), [events]);
  const items = useMemo(() => foldEvents(events, shown), [events, shown]);
  const toggle = (kind: string) =>
    setShown((current) => {
      const next = new Set(current);
      if (next.has(kind)) next.delete(kind);
      else next.add(kind);
      return next;
    });

  return (
    <div className="event-log" data-testid="event-log">
      {kinds.length > 1 && (
        <fieldset className="event-filters" data-testid="event-filters">
          <legend className="muted">Show kinds (none chosen: all)</legend>
          {kinds.map(({ kind, count }) => (
            <label key={kind} className="inline chip">
              <input type="checkbox" checked={shown.has(kind)} onChange={() => toggle(kind)} data-filter-kind={kind} />
              {kind} <span className="muted">({count})</span>
            </label>
          ))}
          {shown.size > 0 && (
            <button type="button" className="secondary small" onClick={() => setShown(new Set())}>
              Show all
            </button>
          )}
        </fieldset>
      )}
      {events.length === 0 && <p className="muted">No events yet.</p>}
      <ul>
        {items.map((item) =>
          item.type === "event" ? (
            <EventLine key={item.event.id} event={item.event} />
          ) : (
            <li key={item.key} className="event-fold" data-testid="event-fold" data-fold-kind={item.kind}>
              <details>
                <summary>
                  <span className="event-icon" aria-hidden="true">
                    {eventStyle(item.kind).icon}
                  </span>
                  <time>{formatTime(item.events[0].created_at)}</time> {foldTitle(item)}
                </summary>
                <ul>
                  {item.events.map((event) => (
                    <EventLine key={event.id} event={event} />
                  ))}
                </ul>
              </details>
            </li>
          ),
        )}
      </ul>
    </div>
  );
}
