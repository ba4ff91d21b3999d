"""Datasets in one place: the shard store, file formats, the bookkeeping service, the HTTP routes."""
