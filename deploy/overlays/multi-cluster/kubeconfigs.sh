#!/bin/sh
# Usage: sh deploy/overlays/multi-cluster/kubeconfigs.sh CLUSTER CONTEXT [DIR [SERVER]]
#
# Adds member cluster CLUSTER to the hub's three kubeconfigs, DIR/kto-watcher.kubeconfig,
# DIR/kto-reconciler.kubeconfig and DIR/kto-status.kubeconfig (DIR defaults to the current
# directory; the files are made when missing): a context named CLUSTER (the first part of that
# cluster's job keys) whose user is the service's token from the member, read through your
# kubeconfig's CONTEXT, where deploy/overlays/multi-cluster/member was applied. SERVER is the
# member's API server address as the hub reaches it (default: CONTEXT's). Then store each file in
# the hub as the Secret kto-<service>-kubeconfig, key "config" (docs/deploy.md, "Many clusters").
set -eu
if [ $# -lt 2 ]; then
  sed -n '2,10p' "$0" >&2
  exit 2
fi
cluster=$1
context=$2
dir=${3:-.}
server=${4:-$(kubectl config view --minify --context "$context" -o jsonpath='{.clusters[0].cluster.server}')}
ca=$(mktemp)
trap 'rm -f "$ca"' EXIT
for service in watcher reconciler status; do
  token=""
  tries=0
  while [ -z "$token" ]; do  # the member's token controller fills the Secret in
    token=$(kubectl --context "$context" -n kto-system get secret "kto-$service-token" \
      -o jsonpath='{.data.token}' | base64 -d)
    tries=$((tries + 1))
    if [ -z "$token" ]; then
      if [ "$tries" -ge 60 ]; then
        echo "kubeconfigs.sh: the Secret kto-$service-token in $context has no token after 30s" >&2
        exit 1
      fi
      sleep 0.5
    fi
  done
  kubectl --context "$context" -n kto-system get secret "kto-$service-token" \
    -o jsonpath='{.data.ca\.crt}' | base64 -d > "$ca"
  file="$dir/kto-$service.kubeconfig"
  kubectl config --kubeconfig "$file" set-cluster "$cluster" --server "$server" \
    --certificate-authority "$ca" --embed-certs=true >/dev/null
  kubectl config --kubeconfig "$file" set-credentials "$cluster-kto-$service" --token "$token" >/dev/null
  kubectl config --kubeconfig "$file" set-context "$cluster" --cluster "$cluster" \
    --user "$cluster-kto-$service" >/dev/null
  echo "$file: context $cluster, user $cluster-kto-$service"
done
