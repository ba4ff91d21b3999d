"""A run's live swarm on the coordinator.

`machine.RunMachine` is the run's logic as a pure state machine: inputs in (`inputs.py`: peer
messages, joins and departures, timer ticks, owner actions, the database's confirmations),
decisions out (`decisions.py`: messages to send, channels to close, rows to write). `server.live`
is the thin async shell that feeds it and carries its decisions out.
"""
