"""The SwarmHub peer: a stage server and a trainer, talking to other peers directly."""
