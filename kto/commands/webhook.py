"""`kto webhook`: the validating and mutating admission webhook of every kind kto serves.

In: a serving certificate and key (``--tls-cert-file`` / ``--tls-private-key-file``
or ``$KTO_WEBHOOK_TLS_CERT_FILE`` / ``$KTO_WEBHOOK_TLS_PRIVATE_KEY_FILE``), or
``--self-signed DIR`` to make one for local use. Out: HTTPS on ``--port``
(AdmissionReview ``admission.k8s.io/v1``, ``/healthz``, ``/readyz``) and the
line ``ready <url> [<ca file>]`` once it listens; or, with
``--print-configurations URL``, the two webhook configurations to register it
(YAML) and exit. See docs/admission.md.
"""

from __future__ import annotations

import argparse
import os
import pathlib

HELP = "run the admission webhook (validation and defaulting of kto's kinds over TLS)"

CERT_ENV = "KTO_WEBHOOK_TLS_CERT_FILE"
KEY_ENV = "KTO_WEBHOOK_TLS_PRIVATE_KEY_FILE"


def add_arguments(parser: argparse.ArgumentParser) -> None:
    from kto.cli import default_of
    from services.webhook.settings import WebhookSettings

    host, port = default_of(WebhookSettings, "host"), default_of(WebhookSettings, "port")
    parser.add_argument("--host", default=host, help=f"address to listen on (default {host})")
    parser.add_argument("--port", type=int, default=port, help=f"port to listen on (default {port}; 0 = any free)")
    parser.add_argument("--tls-cert-file", type=pathlib.Path, default=None, metavar="FILE",
                        help=f"PEM serving certificate (default ${CERT_ENV})")
    parser.add_argument("--tls-private-key-file", type=pathlib.Path, default=None, metavar="FILE",
                        help=f"PEM key of the certificate (default ${KEY_ENV})")
    parser.add_argument("--self-signed", type=pathlib.Path, default=None, metavar="DIR",
                        help="serve a certificate of a CA of its own, made in DIR (ca.crt, tls.crt, tls.key) "
                             "unless a valid one is there: for local use")
    parser.add_argument("--cert-host", action="append", default=[], metavar="NAME",
                        help="a host name or IP address the self-signed certificate names besides 127.0.0.1 "
                             "and localhost (repeatable)")
    parser.add_argument("--kubeconfig", type=pathlib.Path, default=None, metavar="FILE",
                        help="credentials of the clusters whose objects the rules read (a TrainJob's runtime): "
                             "/clusters/<context>/... reads through that context, the plain paths through the "
                             "current one (default: the in-cluster service account)")
    parser.add_argument("--reuse-port", action="store_true",
                        help="share the port with other webhook processes on this host (SO_REUSEPORT)")
    parser.add_argument("--print-configurations", default=None, metavar="URL",
                        help="print the ValidatingWebhookConfiguration and MutatingWebhookConfiguration for a "
                             "webhook at URL (caBundle from --ca-file or the self-signed CA) and exit")
    parser.add_argument("--ca-file", type=pathlib.Path, default=None, metavar="FILE",
                        help="PEM CA that signed the serving certificate, for --print-configurations")


def _files(args: argparse.Namespace) -> tuple[pathlib.Path, pathlib.Path, pathlib.Path | None]:
    """(certificate, key, CA or None) from the flags, the environment or the self-signed directory."""
    from kto import cli

    cert = args.tls_cert_file or (pathlib.Path(os.environ[CERT_ENV]) if os.environ.get(CERT_ENV) else None)
    key = args.tls_private_key_file or (pathlib.Path(os.environ[KEY_ENV]) if os.environ.get(KEY_ENV) else None)
    if args.self_signed is not None:
        if args.tls_cert_file or args.tls_private_key_file:
            raise cli.UserError("--self-signed makes its own certificate: leave out --tls-cert-file and "
                                "--tls-private-key-file")
        from services.webhook import certifying

        try:
            made = certifying.ensure(args.self_signed, [*certifying.DEFAULT_HOSTS, *args.cert_host])
        except OSError as exc:
            raise cli.UserError(f"--self-signed {args.self_signed}: {exc.strerror or exc}") from None
        return made.cert, made.key, args.ca_file or made.ca.resolve()
    if cert is None or key is None:
        raise cli.UserError(f"no serving certificate: give --tls-cert-file and --tls-private-key-file "
                            f"(or ${CERT_ENV} and ${KEY_ENV}), or --self-signed DIR for local use")
    for flag, path in (("--tls-cert-file", cert), ("--tls-private-key-file", key), ("--ca-file", args.ca_file)):
        if path is not None and not path.is_file():
            raise cli.UserError(f"{flag} {path}: no such file")
    return cert, key, args.ca_file


def _print_configurations(url: str, ca: pathlib.Path | None) -> int:
    import yaml

    from kto import cli
    from services.webhook import registering

    if not url.startswith("https://"):
        raise cli.UserError(f"--print-configurations {url}: the API server calls webhooks over https:// only")
    if ca is None:
        raise cli.UserError("--print-configurations needs the CA of the serving certificate: --ca-file FILE, "
                            "or --self-signed DIR")
    print(yaml.safe_dump_all(registering.configurations(url, ca.read_bytes()), sort_keys=False), end="")
    return 0


def run(args: argparse.Namespace) -> int:
    import ssl

    from kto import cli, serving
    from services.webhook import running
    from services.webhook.settings import WebhookSettings

    if not 0 <= args.port <= 65535:
        raise cli.UserError(f"--port {args.port}: not a port number")
    cert, key, ca = _files(args)
    if args.print_configurations is not None:
        return _print_configurations(args.print_configurations, ca)
    if args.kubeconfig is not None and not args.kubeconfig.is_file():
        raise cli.UserError(f"--kubeconfig {args.kubeconfig}: no such file")
    settings = WebhookSettings(cert_file=cert, key_file=key, host=args.host, port=args.port,
                               reuse_port=args.reuse_port, kubeconfig=args.kubeconfig)

    def ready(url: str) -> None:
        serving.announce(f"ready {url}" + (f" {ca}" if ca is not None else ""))

    async def serve() -> None:
        try:
            await running.run(settings, ready)
        except ssl.SSLError as exc:
            raise cli.UserError(f"the certificate {cert} and key {key} do not load: {exc.reason or exc}") from None
        except OSError as exc:
            raise cli.UserError(f"cannot serve on {args.host}:{args.port}: {exc.strerror or exc}") from None

    return serving.serve(serve)
