"""``kto console``: a web console over every cluster's jobs and their audit log.

In: a kubeconfig (``--kubeconfig``, else the one ``kto up`` wrote in its state
dir, else ``$KUBECONFIG`` or ``~/.kube/config``) whose contexts are the
clusters; the broker from ``KTO_KAFKA_*`` or ``--bootstrap``; where to listen
and the host names it answers to. Out: on stdout ``ready http://HOST:PORT/``
once it listens, then the pages (see :mod:`kto.console.serving`) until Ctrl-C or
SIGTERM. On a loopback address a request without a bearer token is the
kubeconfig's user; on any other address every request needs one (docs/
observability.md, "Console authentication"). Bad input (no or an unreadable
kubeconfig, a bad port or one in use, a trace URL without ``{trace_id}``, an
``--allowed-host`` that is not a host name) is one line and exit code 2.
"""

from __future__ import annotations

import argparse
import os
import pathlib

HELP = "Serve a web console: every cluster's jobs, and each job's conditions, timeline and decisions, live."

_EPILOG = """\
examples:
  kto console                                    # after `kto up`: .kto/kubeconfig, KTO_KAFKA_BOOTSTRAP
  kto console --bootstrap 127.0.0.1:55121 --port 8080
  kto console --kubeconfig ~/.kube/config --trace-url 'http://jaeger:16686/trace/{trace_id}'
  kto console --host 0.0.0.0 --allowed-host console.example.com   # every request needs a bearer token
Then open http://127.0.0.1:8080/ (the ready line names the address). On 127.0.0.1 (or ::1,
localhost) a request without a token is the kubeconfig's own user; a bearer token
(Authorization: Bearer TOKEN) is reviewed by each cluster's API server either way, and only
the namespaces its user may list are shown.
"""


def add_arguments(parser: argparse.ArgumentParser) -> None:
    from kto import stack
    from kto.cli import default_of
    from kto.console.settings import ConsoleSettings

    state_dir = default_of(stack.StackSettings, "state_dir")
    host, port = default_of(ConsoleSettings, "host"), default_of(ConsoleSettings, "port")
    refresh = default_of(ConsoleSettings, "refresh")
    parser.epilog = _EPILOG
    parser.formatter_class = argparse.RawDescriptionHelpFormatter
    parser.add_argument("--kubeconfig", type=pathlib.Path, default=None,
                        help="kubeconfig whose contexts are the clusters shown (default: STATE_DIR/kubeconfig "
                             "when it exists, else $KUBECONFIG or ~/.kube/config)")
    parser.add_argument("--state-dir", type=pathlib.Path, default=state_dir,
                        help=f"the state dir of `kto up` whose kubeconfig is used without --kubeconfig (default {state_dir})")
    parser.add_argument("--bootstrap", default=None, help="Kafka bootstrap address (default: KTO_KAFKA_BOOTSTRAP)")
    parser.add_argument("--host", default=host,
                        help=f"address to listen on (default {host}); on any but a loopback address every "
                             "request needs a bearer token")
    parser.add_argument("--allowed-host", action="append", default=[], metavar="NAME",
                        help="a host name (or address) requests may name in their Host header besides localhost, "
                             "loopback addresses and --host (repeatable); others are refused (421)")
    parser.add_argument("--port", type=int, default=port, help=f"port to listen on (default {port}; 0: any free one)")
    parser.add_argument("--trace-url", default=default_of(ConsoleSettings, "trace_url"), metavar="TEMPLATE",
                        help="link to a trace, {trace_id} standing for its id, "
                             "e.g. 'http://jaeger:16686/trace/{trace_id}' (default: ids without links)")
    parser.add_argument("--refresh", type=float, default=refresh, metavar="SECONDS",
                        help=f"seconds between two looks at the clusters while a page is open (default {refresh:g})")


def _kubeconfig(args: argparse.Namespace) -> pathlib.Path:
    from kto.cli import UserError

    given: pathlib.Path | None = args.kubeconfig
    if given is not None:
        if not given.is_file():
            raise UserError(f"--kubeconfig {given}: no such file")
        return given
    candidates: list[pathlib.Path] = [args.state_dir / "kubeconfig"]
    if os.environ.get("KUBECONFIG"):
        candidates.append(pathlib.Path(os.environ["KUBECONFIG"].split(os.pathsep)[0]))
    candidates.append(pathlib.Path.home() / ".kube" / "config")
    found = next((path for path in candidates if path.is_file()), None)
    if found is None:
        raise UserError(f"no kubeconfig: none of {', '.join(str(c) for c in candidates)} exists "
                        "(give --kubeconfig FILE, or start `kto up`)")
    return found


def run(args: argparse.Namespace) -> int:
    import logging

    from kto import serving
    from kto.cli import UserError
    from kto.console import authenticating
    from kto.console import serving as console_serving
    from kto.console.settings import ConsoleSettings
    from shared.bus.settings import KafkaSettings, SettingsError
    from shared.kube import connecting

    if not 0 <= args.port <= 65535:
        raise UserError(f"--port {args.port}: not a port (0 to 65535)")
    if args.refresh <= 0:
        raise UserError(f"--refresh {args.refresh:g}: must be more than 0")
    try:
        args.trace_url.format(trace_id="0" * 32)
    except (KeyError, IndexError, ValueError) as exc:
        raise UserError(f"--trace-url {args.trace_url!r}: only {{trace_id}} may stand in braces ({exc!r})") from None
    if args.trace_url and "{trace_id}" not in args.trace_url:
        raise UserError(f"--trace-url {args.trace_url!r}: has no {{trace_id}}")
    for name in args.allowed_host:
        if authenticating.hostname(name) is None:
            raise UserError(f"--allowed-host {name!r}: not a host name (no scheme, path or spaces)")
    kubeconfig = _kubeconfig(args)
    try:
        contexts = connecting.context_names(kubeconfig)
    except ValueError as exc:
        raise UserError(str(exc)) from None
    if not contexts:
        raise UserError(f"the kubeconfig {kubeconfig} has no context")
    try:
        kafka = KafkaSettings.from_env({**os.environ, **({"KTO_KAFKA_BOOTSTRAP": args.bootstrap}
                                                         if args.bootstrap else {})})
    except SettingsError as exc:
        raise UserError(str(exc)) from None
    settings = ConsoleSettings(kubeconfig=kubeconfig.resolve(), contexts=tuple(contexts), kafka=kafka,
                               host=args.host, port=args.port, trace_url=args.trace_url, refresh=args.refresh,
                               allowed_hosts=tuple(args.allowed_host))

    async def console() -> None:
        # The Kafka client's complaints about a broker that went away are not the user's business:
        # the job page says the audit log cannot be read.
        logging.getLogger("aiokafka").setLevel(logging.CRITICAL)
        try:
            await console_serving.serve(settings, lambda url: serving.announce(f"ready {url}"))
        except console_serving.ListenError as exc:
            raise UserError(str(exc)) from None

    return serving.serve(console)
