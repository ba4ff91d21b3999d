"""Launchers: the `swarmhub` command, the demo and LocalSwarm, which start the coordinator and peers.

They depend on both ends; `swarmhub/` holds only what the coordinator and peers share.
"""
