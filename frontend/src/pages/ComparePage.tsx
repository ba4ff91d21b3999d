// Several runs side by side (#/compare?runs=1,2,3): their loss curves on one chart, their settings
// with the differing ones first, and their tags and notes (editable by each run's owner).
import { useEffect, useMemo, useState } from "react";
import { call, client, errorMessage } from "../api";
import { Chart } from "../components/Chart";
import { ArchiveButton, RunLabels } from "../components/RunLabels";
import { StatusBadge } from "../components/StatusBadge";
import type { LossPoint, RunDetail, UserOut } from "../generated/api";
import { overlayColumns } from "../overlay";
import { diffSettings, type SettingValue } from "../settingsDiff";

const COLORS = ["#2563eb", "#dc2626", "#16a34a", "#f59e0b", "#7c3aed", "#0891b2", "#db2777", "#65a30d"];
const CURVE_POINTS = 500;

interface Compared {
  run: RunDetail;
  curve: LossPoint[];
}

function show(value: SettingValue): string {
  if (value === null) return "—";
  return String(value);
}

export function ComparePage({ runIds, user }: { runIds: number[]; user: UserOut }) {
  const [compared, setCompared] = useState<Compared[] | null>(null);
  const [error, setError] = useState("");

  useEffect(() => {
    let stopped = false;
    setCompared(null);
    setError("");
    Promise.all(
      runIds.map(async (runId) => {
        const path = { params: { path: { run_id: runId } } };
        const [run, curve] = await Promise.all([
          call(client.GET("/api/runs/{run_id}", path)),
          call(
            client.GET("/api/runs/{run_id}/loss-curve", {
              params: { path: { run_id: runId }, query: { points: CURVE_POINTS } },
            }),
          ),
        ]);
        return { run, curve };
      }),
    ).then(
      (loaded) => {
        if (!stopped) setCompared(loaded);
      },
      (e: unknown) => {
        if (!stopped) setError(errorMessage(e));
      },
    );
    return () => {
      stopped = true;
    };
  }, [runIds.join(",")]);

  const data = useMemo(() => overlayColumns((compared ?? []).map((c) => c.curve)), [compared]);
  const styles = useMemo(
    () => (compared ?? []).map((c, i) => ({ label: `${c.run.name} (#${c.run.id})`, color: COLORS[i % COLORS.length] })),
    [compared],
  );
  const rows = useMemo(
    () => diffSettings((compared ?? []).map((c) => c.run as unknown as Record<string, unknown>)),
    [compared],
  );
  const saved = (run: RunDetail) =>
    setCompared((current) => (current ?? []).map((c) => (c.run.id === run.id ? { ...c, run } : c)));

  if (runIds.length < 2) {
    return (
      <section>
        <h1>Compare runs</h1>
        <p className="muted">
          Pick two or more runs in the <a href="#/">runs list</a> and choose “Compare”.
        </p>
      </section>
    );
  }
  if (error) return <p className="error">{error}</p>;
  if (compared === null) return <p className="muted">Loading runs…</p>;

  const differing = rows.filter((r) => r.differs).length;
  return (
    <section className="compare-page" data-testid="compare-page">
      <div className="page-head">
        <h1>Compare {compared.length} runs</h1>
        <a className="button secondary" href="#/">
          Back to runs
        </a>
      </div>

      <div className="card">
        <Chart
          title="Loss"
          label="loss"
          color={COLORS[0]}
          series={styles}
          data={data}
          version={compared.length}
          testId="compare-loss-chart"
          smoothable
        />
      </div>

      <div className="card">
        <h2>Settings</h2>
        <p className="muted" data-testid="settings-diff-summary">
          {differing === 0 ? "All settings are the same." : differing === 1 ? "1 setting differs." : `${differing} settings differ.`}
        </p>
        <div className="table-scroll">
          <table className="table compact" data-testid="settings-diff">
            <thead>
              <tr>
                <th scope="col">Setting</th>
                {compared.map((c, i) => (
                  <th scope="col" key={c.run.id}>
                    <span className="swatch" style={{ background: COLORS[i % COLORS.length] }} aria-hidden="true" />{" "}
                    <a href={`#/runs/${c.run.id}`}>{c.run.name}</a> <span className="muted">#{c.run.id}</span>
                  </th>
                ))}
              </tr>
            </thead>
            <tbody>
              {rows.map((row) => (
                <tr
                  key={row.name}
                  className={row.differs ? "differs" : undefined}
                  data-testid="setting-row"
                  data-setting={row.name}
                  data-differs={row.differs ? "true" : "false"}
                >
                  <th scope="row">
                    {row.name}
                    {row.differs && <span className="visually-hidden"> (differs)</span>}
                  </th>
                  {row.values.map((value, i) => (
                    <td key={compared[i].run.id}>{show(value)}</td>
                  ))}
                </tr>
              ))}
            </tbody>
          </table>
        </div>
      </div>

      <div className="grid-2">
        {compared.map((c, i) => (
          <div className="card" key={c.run.id} data-testid="compare-run" data-run-id={c.run.id}>
            <div className="card-head">
              <h2>
                <span className="swatch" style={{ background: COLORS[i % COLORS.length] }} aria-hidden="true" />{" "}
                {c.run.name}
              </h2>
              <StatusBadge status={c.run.status} />
            </div>
            <p className="muted">
              step {c.run.current_step}
              {c.run.archived ? " · archived" : ""}
            </p>
            <RunLabels run={c.run} editable={c.run.owner_id === user.id} onSaved={saved} />
            {c.run.owner_id === user.id && <ArchiveButton run={c.run} onSaved={saved} />}
          </div>
        ))}
      </div>
    </section>
  );
}
