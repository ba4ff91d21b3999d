import { useState } from "react";
import { call, client, errorMessage } from "../api";
import { formatCount } from "../format";
import { useLoad } from "../hooks/useLoad";

const BUNDLED = "python-stdlib";

/**
 * The run's dataset: the bundled corpus or one the coordinator holds (GET /api/datasets), and an
 * upload of text, JSONL or Parquet files that becomes one: one file in one request, several through
 * a draft (start it, add each file, seal it). Peers only ever read what the coordinator serves.
 */
export function DatasetPicker(props: {
  value: string;
  invalid: boolean;
  describedBy?: string;
  onChange: (value: string) => void;
}) {
  const { data: datasets, error, reload } = useLoad(() => call(client.GET("/api/datasets")), []);
  const [uploading, setUploading] = useState("");
  const [uploadError, setUploadError] = useState("");
  const known = datasets?.some((d) => d.id === props.value) ?? false;

  const raw = {
    bodySerializer: (body: unknown) => body as BodyInit,
    headers: { "Content-Type": "application/octet-stream" },
  };

  async function uploadOne(file: File) {
    return call(
      client.POST("/api/datasets", {
        params: { query: { filename: file.name, name: file.name } },
        body: file as unknown as string,
        ...raw,
      }),
    );
  }

  async function uploadSeveral(files: File[]) {
    const name = `${files[0].name} and ${files.length - 1} more`;
    const draft = await call(client.POST("/api/datasets/drafts", { params: { query: { name } } }));
    const path = { draft_id: draft.id };
    try {
      for (const file of files) {
        setUploading(`${file.name} (${files.indexOf(file) + 1} of ${files.length})`);
        await call(
          client.POST("/api/datasets/drafts/{draft_id}/files", {
            params: { path, query: { filename: file.name } },
            body: file as unknown as string,
            ...raw,
          }),
        );
      }
      return await call(client.POST("/api/datasets/drafts/{draft_id}/seal", { params: { path } }));
    } catch (e) {
      // A draft left behind would count against the owner's limit until it expires.
      await client.DELETE("/api/datasets/drafts/{draft_id}", { params: { path } });
      throw e;
    }
  }

  async function upload(files: File[]) {
    setUploadError("");
    setUploading(files[0].name);
    try {
      const dataset = files.length === 1 ? await uploadOne(files[0]) : await uploadSeveral(files);
      props.onChange(dataset.id);
      reload();
    } catch (e) {
      setUploadError(`Upload failed: ${errorMessage(e)}`);
    } finally {
      setUploading("");
    }
  }

  return (
    <div className="dataset-picker">
      <select
        aria-label="Corpora the coordinator holds"
        value={props.value === BUNDLED || known ? props.value : ""}
        onChange={(e) => e.target.value && props.onChange(e.target.value)}
      >
        <option value={BUNDLED}>python-stdlib — bundled corpus</option>
        {(datasets ?? []).map((d) => (
          <option key={d.id} value={d.id}>
            {d.name} — {formatCount(d.bytes)} bytes, {d.id.slice(0, 12)}…
          </option>
        ))}
        {props.value !== BUNDLED && !known && <option value="">other id (below)</option>}
      </select>
      <input
        id="f-dataset"
        name="dataset"
        type="text"
        value={props.value}
        aria-invalid={props.invalid || undefined}
        aria-describedby={props.describedBy}
        onChange={(e) => props.onChange(e.target.value)}
      />
      <label className="upload">
        Upload text, JSONL or Parquet files
        <input
          type="file"
          multiple
          accept=".txt,.text,.md,.rst,.py,.csv,.jsonl,.ndjson,.parquet"
          disabled={uploading !== ""}
          onChange={(e) => {
            const files = Array.from(e.target.files ?? []);
            e.target.value = "";
            if (files.length > 0) void upload(files);
          }}
        />
      </label>
      {uploading && <div className="hint">Uploading {uploading}…</div>}
      {(uploadError || error) && (
        <div className="field-error" role="alert">
          {uploadError || `Could not list datasets: ${error}`}
        </div>
      )}
    </div>
  );
}
