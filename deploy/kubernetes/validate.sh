#!/usr/bin/env bash
# Validates the Kubernetes manifests offline against the Kubernetes API schemas bundled with
# kubernetes-validate (PyPI; installed with pip when missing): every file on its own, and the
# kustomize rendering with and without components/tls-secret when kubectl is available.
# Kinds defined by CRDs (InferencePool, HTTPRoute, DestinationRule, ServiceMonitor) have no
# bundled schema and are only warned about here; tests/deploy_manifests.rs checks their fields.
set -euo pipefail
dir=$(cd "$(dirname "$0")" && pwd)
if ! python3 -c 'import kubernetes_validate' 2>/dev/null; then
  python3 -m pip --version >/dev/null 2>&1 || { apt-get update >/dev/null && apt-get install -y python3-pip >/dev/null; }
  python3 -m pip install --quiet kubernetes-validate 2>/dev/null \
    || python3 -m pip install --quiet --break-system-packages kubernetes-validate
fi
validate() { python3 -m kubernetes_validate --strict --quiet "$@"; }
files=()
for f in "$dir"/*.yaml; do
  [ "$(basename "$f")" = kustomization.yaml ] || files+=("$f")
done
validate "${files[@]}"
if command -v kubectl >/dev/null 2>&1; then
  work=$(mktemp -d)
  trap 'rm -rf "$work"' EXIT
  kubectl kustomize "$dir" >"$work/plain.yaml"
  validate "$work/plain.yaml"
  mkdir "$work/tls"
  rel=$(realpath --relative-to="$work/tls" "$dir") # kustomize takes relative paths only
  printf 'resources: [%s]\ncomponents: [%s]\n' "$rel" "$rel/components/tls-secret" >"$work/tls/kustomization.yaml"
  kubectl kustomize "$work/tls" >"$work/tls.yaml"
  grep -q -- '--cert-path=/etc/epp/tls' "$work/tls.yaml"
  validate "$work/tls.yaml"
else
  echo "kubectl not found: kustomize rendering not checked" >&2
fi
echo "deploy/kubernetes: manifests valid"
