#!/bin/sh
# Usage: sh deploy/webhook-ca-bundle.sh CA_FILE [KUBECTL_ARGS...]
#
# Puts the PEM CA that signed the webhook's serving certificate (the Secret kto-webhook-tls) into
# every webhook of kto-validating-webhook-configuration and kto-mutating-webhook-configuration, as
# their caBundle, so that the API server trusts the webhook. Not needed with cert-manager
# (deploy/components/cert-manager: its CA injector does it). A later `kubectl apply -k` keeps it
# (deploy/ sets no caBundle). KUBECTL_ARGS (e.g. --context east) go to every kubectl call.
set -eu
if [ $# -lt 1 ] || [ ! -f "$1" ]; then
  sed -n '2,9p' "$0" >&2
  exit 2
fi
bundle=$(base64 < "$1" | tr -d '\n')
shift
for config in validating mutating; do
  name="kto-$config-webhook-configuration"
  count=$(kubectl "$@" get "${config}webhookconfiguration" "$name" \
    -o jsonpath='{range .webhooks[*]}{.name}{"\n"}{end}' | wc -l)
  ops=""
  i=0
  while [ "$i" -lt "$count" ]; do
    ops="$ops${ops:+,}{\"op\":\"add\",\"path\":\"/webhooks/$i/clientConfig/caBundle\",\"value\":\"$bundle\"}"
    i=$((i + 1))
  done
  kubectl "$@" patch "${config}webhookconfiguration" "$name" --type=json -p "[$ops]"
done
