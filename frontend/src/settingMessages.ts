// The words an owner reads when a run setting is refused: the same sentences the coordinator's 422
// carries (swarmhub/setting_messages.py), so a message reads alike whoever caught it.
// tests/run-settings-messages.json holds cases both sides are tested against.

/** A setting without a default, left empty, in words that say what to do. */
export const MISSING: Readonly<Record<string, string>> = {
  name: "Give the run a name.",
  model_preset: "Choose a model preset.",
  dataset: "Choose a dataset.",
};

/** A bound as the form shows it; percent settings (fractions on the wire) with '%'. */
function bound(value: number, percent: boolean): string {
  return `${String(value)}${percent ? "%" : ""}`;
}

export const atLeast = (n: number, percent = false) => `Must be at least ${bound(n, percent)}.`;
export const atMost = (n: number, percent = false) => `Must be at most ${bound(n, percent)}.`;
export const greaterThan = (n: number, percent = false) => `Must be greater than ${bound(n, percent)}.`;
export const lessThan = (n: number, percent = false) => `Must be less than ${bound(n, percent)}.`;
export const tooLong = (n: number) => `At most ${n} characters.`;
export const WHOLE_NUMBER = "Enter a whole number.";
export const NUMBER = "Enter a number.";

/** "Choose 'a', 'b' or 'c'." */
export function choices(options: readonly string[]): string {
  const quoted = options.map((option) => `'${option}'`);
  const listed = quoted.length === 1 ? quoted[0] : `${quoted.slice(0, -1).join(", ")} or ${quoted[quoted.length - 1]}`;
  return `Choose ${listed}.`;
}

export const stagesOverBlocks = (nLayer: number, preset: string) =>
  `Must be at most ${nLayer}: preset '${preset}' has ${nLayer} blocks.`;

export const seqLenOver = (maxSeqLen: number, preset: string) => `Must be at most ${maxSeqLen} for preset '${preset}'.`;

const grouped = (n: number) => n.toLocaleString("en-US");

export function activationsTooLarge(microbatch: number, seqLen: number, dModel: number, limit: number): string {
  return (
    `microbatch_size x seq_len x d_model is ${microbatch} x ${seqLen} x ${dModel} = ` +
    `${grouped(microbatch * seqLen * dModel)}, over the limit of ${grouped(limit)} ` +
    "(every peer would have to hold activations of that size): lower microbatch_size or seq_len."
  );
}

export const notAMultiple = (microbatch: number) => `Must be a multiple of microbatch_size (${microbatch}).`;
