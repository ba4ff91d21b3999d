"""SwarmHub: SWARM-parallel training on a swarm of unreliable peers.

This package holds what both ends share: the control-plane wire schema, settings and the
`swarmhub` command. The coordinator lives in `server/`, the peer client in `peer/`.
"""

__version__ = "0.1.0"
