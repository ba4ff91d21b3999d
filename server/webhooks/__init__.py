"""Run webhooks: signed POSTs of a run's stall, recovery, finish and checkpoint events to owners' URLs."""
