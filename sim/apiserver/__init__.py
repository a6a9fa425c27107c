"""The API server side of the local cluster: the store, the HTTP API and the controllers that run beside it.

It never imports sim.node: logs and exec reach a node through :class:`sim.apiserver.kubelets.KubeletApi`.
"""
