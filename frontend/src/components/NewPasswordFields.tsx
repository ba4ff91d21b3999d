// The new password and its repeat, as the account, invitation and reset forms ask for them: one
// wording and one rule for all three.

// Mirrors server.security.MIN_PASSWORD_LENGTH; the server's refusal is the authority.
export const MIN_PASSWORD_LENGTH = 12;

export type NewPassword = { password: string; repeat: string };

export const EMPTY_NEW_PASSWORD: NewPassword = { password: "", repeat: "" };

/** Why the pair cannot be sent, or null: the length is left to the server, which says so itself. */
export function newPasswordProblem({ password, repeat }: NewPassword): string | null {
  return password === repeat ? null : "the new passwords differ";
}

export function NewPasswordFields({ value, onChange }: { value: NewPassword; onChange: (next: NewPassword) => void }) {
  return (
    <>
      <label>
        New password
        <input
          name="new-password"
          type="password"
          autoComplete="new-password"
          value={value.password}
          onChange={(e) => onChange({ ...value, password: e.target.value })}
          required
        />
      </label>
      <label>
        Repeat the new password
        <input
          name="repeat-password"
          type="password"
          autoComplete="new-password"
          value={value.repeat}
          onChange={(e) => onChange({ ...value, repeat: e.target.value })}
          required
        />
      </label>
    </>
  );
}
