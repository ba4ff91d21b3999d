"""The contribution ledger: what each peer and each participant (join token) gave a run."""
