"""Stage checkpoints in one place: the directory store, the bookkeeping service, the HTTP routes."""
