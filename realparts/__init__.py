"""The real parts of the conformance tier: Kubernetes and Kafka built from registries.

Like sim/, a development and test tool: production code never imports it.
"""
