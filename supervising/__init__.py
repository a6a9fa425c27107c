"""The one process supervisor of the dev tools: children started, stopped, killed and restarted.

``supervising.processes`` runs a child in a process group (a session) of its own with its output
in a log, and stops it the same way wherever a dev tool starts one: the local stack's ``kto``
children (kto/stack.py), the real control plane's binaries and the training-operator
(realparts/kube.py, realparts/upstream.py), Apache Kafka (realparts/kafka.py) and Tansu
(realparts/tansu.py). Like sim/ and realparts/, a dev and test tool: production code never
imports it, and it imports no other kto code.
"""
