#!/bin/sh
# Usage: sh deploy/overlays/multikueue/kubeconfig.sh WORKER CONTEXT [DIR [SERVER]]
#
# Writes DIR/WORKER.kubeconfig (DIR defaults to the current directory): the kubeconfig the
# manager's Kueue reaches worker cluster WORKER with, its user the token of multikueue-sa
# (deploy/overlays/multikueue/worker, applied there), read through your kubeconfig's CONTEXT.
# The CA and the token are written inline, as MultiKueue requires (no file paths, no
# insecure-skip-tls-verify). SERVER is the worker's API server address as the manager reaches it
# (default: CONTEXT's). Then store it in the manager as the Secret WORKER of kueue-system, key
# "kubeconfig" (docs/fleets.md, "MultiKueue"). The file holds a credential: delete it after.
set -eu
if [ $# -lt 2 ]; then
  sed -n '2,11p' "$0" >&2
  exit 2
fi
worker=$1
context=$2
dir=${3:-.}
server=${4:-$(kubectl config view --minify --context "$context" -o jsonpath='{.clusters[0].cluster.server}')}
# The worker's token controller fills the Secret in.
kubectl --context "$context" -n kueue-system wait secret/multikueue-sa-token \
  --for=jsonpath='{.data.token}' --timeout=30s >/dev/null
token=$(kubectl --context "$context" -n kueue-system get secret multikueue-sa-token \
  -o jsonpath='{.data.token}' | base64 -d)
ca=$(mktemp)
trap 'rm -f "$ca"' EXIT
kubectl --context "$context" -n kueue-system get secret multikueue-sa-token \
  -o jsonpath='{.data.ca\.crt}' | base64 -d > "$ca"
file="$dir/$worker.kubeconfig"
umask 077
kubectl config --kubeconfig "$file" set-cluster "$worker" --server "$server" \
  --certificate-authority "$ca" --embed-certs=true >/dev/null
kubectl config --kubeconfig "$file" set-credentials multikueue-sa --token "$token" >/dev/null
kubectl config --kubeconfig "$file" set-context "$worker" --cluster "$worker" --user multikueue-sa >/dev/null
kubectl config --kubeconfig "$file" use-context "$worker" >/dev/null
echo "$file: context $worker, user multikueue-sa"
