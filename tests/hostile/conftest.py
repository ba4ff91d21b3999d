"""The hostile-peer suite: attackers speaking the real wire against a real coordinator.

The coordinator fixtures (an app over each database with the real live swarm, accounts, peers on
the real control channel) are the server suite's; they are shared here rather than copied.
"""

from tests.server.conftest import *  # noqa: F403
