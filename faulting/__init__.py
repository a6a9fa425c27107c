"""API faults in front of any Kubernetes API server: the fault grammar and a faulting proxy.

In: a kubeconfig naming an API server (sim/ or kube-apiserver) and a fault spec
(faulting/faults.py), changeable at run time through ``PUT /admin/faults``.
Out: an HTTP endpoint that forwards every request to that API server — lists,
streaming watches and logs, exec/attach upgrades — with the client's own
credentials, answering instead, now and then, with the 5xx, 429, 409, latency,
dropped watch or 410 the spec asks for; and a kubeconfig whose server is that
endpoint, for the services under test. sim/ applies the same grammar in process.

A dev and test tool like sim/: production code never imports it.
"""
