// A run's tags and notes, editable by its owner (PATCH /api/runs/{id}/labels); others read them.
import { useState } from "react";
import { call, client, errorMessage } from "../api";
import type { RunDetail } from "../generated/api";

/** "a, b ,, c" -> ["a", "b", "c"]: tags are typed comma-separated. */
export function parseTags(text: string): string[] {
  return text
    .split(",")
    .map((tag) => tag.trim())
    .filter((tag) => tag.length > 0);
}

export function TagList({ tags }: { tags: string[] }) {
  if (tags.length === 0) return null;
  return (
    <span className="tags" data-testid="run-tags">
      {tags.map((tag) => (
        <span key={tag} className="tag">
          {tag}
        </span>
      ))}
    </span>
  );
}

export function RunLabels({ run, editable, onSaved }: { run: RunDetail; editable: boolean; onSaved: (run: RunDetail) => void }) {
  const [editing, setEditing] = useState(false);
  const [tags, setTags] = useState(run.tags.join(", "));
  const [notes, setNotes] = useState(run.notes);
  const [error, setError] = useState("");
  const [busy, setBusy] = useState(false);

  async function save() {
    setBusy(true);
    setError("");
    try {
      const saved = await call(
        client.PATCH("/api/runs/{run_id}/labels", {
          params: { path: { run_id: run.id } },
          body: { tags: parseTags(tags), notes },
        }),
      );
      onSaved(saved);
      setEditing(false);
    } catch (e) {
      setError(errorMessage(e));
    } finally {
      setBusy(false);
    }
  }

  if (!editing) {
    return (
      <div className="run-labels" data-testid="run-labels">
        <TagList tags={run.tags} />
        {run.notes ? (
          <p className="notes" data-testid="run-notes">
            {run.notes}
          </p>
        ) : (
          <p className="muted">No notes.</p>
        )}
        {editable && (
          <button
            type="button"
            className="secondary small"
            onClick={() => {
              setTags(run.tags.join(", "));
              setNotes(run.notes);
              setEditing(true);
            }}
          >
            Edit tags and notes
          </button>
        )}
      </div>
    );
  }
  const id = `labels-${run.id}`;
  return (
    <form
      className="run-labels"
      data-testid="run-labels-form"
      onSubmit={(e) => {
        e.preventDefault();
        void save();
      }}
    >
      <label htmlFor={`${id}-tags`}>Tags (comma-separated)</label>
      <input id={`${id}-tags`} value={tags} onChange={(e) => setTags(e.target.value)} maxLength={900} />
      <label htmlFor={`${id}-notes`}>Notes</label>
      <textarea id={`${id}-notes`} value={notes} onChange={(e) => setNotes(e.target.value)} rows={4} maxLength={10000} />
      {error && <p className="error">{error}</p>}
      <div className="row">
        <button type="submit" disabled={busy}>
          Save
        </button>
        <button type="button" className="secondary" onClick={() => setEditing(false)}>
          Cancel
        </button>
      </div>
    </form>
  );
}

/** Archive (hide from the runs list) or bring back; the run's training is left as it is. */
export function ArchiveButton({ run, onSaved }: { run: RunDetail; onSaved: (run: RunDetail) => void }) {
  const [busy, setBusy] = useState(false);
  const [error, setError] = useState("");
  async function flip() {
    setBusy(true);
    setError("");
    try {
      onSaved(
        await call(
          client.PATCH("/api/runs/{run_id}/labels", {
            params: { path: { run_id: run.id } },
            body: { archived: !run.archived },
          }),
        ),
      );
    } catch (e) {
      setError(errorMessage(e));
    } finally {
      setBusy(false);
    }
  }
  return (
    <>
      <button type="button" className="secondary small" disabled={busy} onClick={() => void flip()} data-testid="archive-toggle">
        {run.archived ? "Unarchive" : "Archive"}
      </button>
      {error && <span className="error">{error}</span>}
    </>
  );
}
