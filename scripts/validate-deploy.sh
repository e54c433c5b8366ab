#!/usr/bin/env bash
# Validates the Kubernetes manifests in deploy/ against the Kubernetes API
# schemas, offline (kubernetes-validate, strict: unknown fields are errors),
# and renders the kustomize overlays when a renderer is here
# (scripts/validate_deploy.py says what is checked).
#
#   scripts/validate-deploy.sh              # validate deploy/
#   scripts/validate-deploy.sh --self-test  # also prove that a broken manifest is refused
#
# Installs kubernetes-validate (PyPI) if it is missing.
set -euo pipefail
cd "$(dirname "$0")/.."

if ! python3 -c 'import kubernetes_validate, yaml' 2>/dev/null; then
  echo "validate-deploy: installing kubernetes-validate (PyPI)" >&2
  python3 -m pip install --quiet --disable-pip-version-check 'kubernetes-validate==1.37.0' pyyaml \
    || python3 -m pip install --quiet --disable-pip-version-check --break-system-packages 'kubernetes-validate==1.37.0' pyyaml
fi

# The dashboards ConfigMap is generated from a copy of dashboards/*.json
# (kustomize reads no file outside deploy/): the copy must be current.
check_dashboards() {
  local bad=0 f
  for f in dashboards/*.json; do
    if ! cmp -s "$f" "deploy/base/dashboards/$(basename "$f")"; then
      echo "validate-deploy: deploy/base/dashboards/$(basename "$f") differs from $f: cp dashboards/*.json deploy/base/dashboards/" >&2
      bad=1
    fi
  done
  return $bad
}

check_dashboards
python3 scripts/validate_deploy.py deploy

if [[ "${1:-}" == "--self-test" ]]; then
  tmp=$(mktemp -d)
  trap 'rm -rf "$tmp"' EXIT
  # An unknown field (a typo) in the servers' StatefulSet must be refused,
  # and so must a value of the wrong type in the nodesim Job.
  cp -r deploy "$tmp/deploy"
  sed -i 's/^  podManagementPolicy: Parallel/  podManagementPolicy: Parallel\n  replicaz: 3/' "$tmp/deploy/base/server.yaml"
  sed -i 's/^  completions: 2$/  completions: two/' "$tmp/deploy/base/nodesim.yaml"
  if python3 scripts/validate_deploy.py "$tmp/deploy" >"$tmp/out" 2>&1; then
    cat "$tmp/out" >&2
    echo "validate-deploy self-test: FAILED: broken manifests were accepted" >&2
    exit 1
  fi
  for want in "replicaz" "completions"; do
    if ! grep -q "$want" "$tmp/out"; then
      cat "$tmp/out" >&2
      echo "validate-deploy self-test: FAILED: the errors do not name $want" >&2
      exit 1
    fi
  done
  echo "validate-deploy self-test: ok: broken manifests refused, naming the fields"
fi
