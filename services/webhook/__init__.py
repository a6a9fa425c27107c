"""The admission webhook: validating and mutating AdmissionReview ``admission.k8s.io/v1`` over TLS.

Stateless; as many processes as wanted serve the same configurations (on one
host with ``--reuse-port``, elsewhere behind a Service). The decisions are
``shared.core.admitting``'s; this package is their HTTP side (``serving``),
the process (``running``), its serving certificate for local use
(``certifying``) and the webhook configurations that register it
(``registering``). See docs/admission.md.
"""
