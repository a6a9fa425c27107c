"""The node side of the local cluster: the simulated kubelet, its two runtimes, exec, logs, the kubelet API.

It reaches an API server only through :class:`sim.node.api.NodeApi`, never sim.apiserver: the same code
runs inside the local cluster and, as the node agent, against any API server.
"""
