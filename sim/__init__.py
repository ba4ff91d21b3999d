"""A discrete-event simulator of SwarmHub swarms: the project's real pure policies (step book and
grants, stochastic routing with bans, averaging rounds, stage choice, rebalancing) driven against
modelled peers (device mix, links, preemption, joins), without tensors, at thousands of peers."""
