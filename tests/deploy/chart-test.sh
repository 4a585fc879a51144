#!/usr/bin/env bash
# One test of the kolo Helm chart: `helm lint --strict` and `helm template` with a value set,
# then validate.mjs over the rendered manifests (Kubernetes schemas + kolo's wiring), or, for
# the bad-* scenarios, the check that the chart's schema rejects the values with a message
# naming the mistake. Usage: chart-test.sh <scenario>   (scenarios: see the case below)
set -euo pipefail

here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
root="$(cd "$here/../.." && pwd)"
chart="$root/deploy/helm/kolo"
values="$here/values"
scenario="${1:?usage: chart-test.sh <scenario>}"
namespace="kolo-test"
release="ci"

mapfile -t tools < <("$here/setup-tools.sh")
helm="${tools[0]}"
node_dir="${tools[1]}"

work="$(mktemp -d "${TMPDIR:-/tmp}/kolo-chart-test.XXXXXX")"
trap 'rm -rf "$work"' EXIT

fail() { echo "FAIL $scenario: $*" >&2; exit 1; }

# Lints, renders (manifests and NOTES) and validates one value set.
# Usage: render_and_validate "<helm value args>" <validate.mjs expectations...>
render_and_validate() {
  local -a set_args
  read -r -a set_args <<<"$1"
  shift
  "$helm" lint --strict --namespace "$namespace" "${set_args[@]}" "$chart" >"$work/lint.txt" 2>&1 ||
    { cat "$work/lint.txt"; fail "helm lint --strict failed"; }
  "$helm" template "$release" "$chart" --namespace "$namespace" "${set_args[@]}" >"$work/manifests.yaml" 2>"$work/template.err" ||
    { cat "$work/template.err"; fail "helm template failed"; }
  node "$here/validate.mjs" --node-dir "$node_dir" --chart "$chart" --manifests "$work/manifests.yaml" \
    --namespace "$namespace" "$@" || fail "rendered manifests do not validate"
  # NOTES.txt: how to port-forward, submit with the CLI and query with curl.
  "$helm" install "$release" "$chart" --namespace "$namespace" --dry-run=client "${set_args[@]}" >"$work/install.txt" 2>&1 ||
    { cat "$work/install.txt"; fail "helm install --dry-run=client failed"; }
  sed -n '/^NOTES:/,$p' "$work/install.txt" >"$work/notes.txt"
  grep -q "port-forward service/$release-kolo-coordinator" "$work/notes.txt" || fail "NOTES do not say how to port-forward"
  grep -q -- "--server 127.0.0.1:[0-9]* --token" "$work/notes.txt" || fail "NOTES do not show a submit with the CLI"
  grep -q "curl .*/v1/jobs" "$work/notes.txt" || fail "NOTES do not show a curl query of the jobs"
}

# Expects the schema to reject a values file, naming the offending key in the error.
# Usage: expect_rejected <values file> <regex the error must match>
expect_rejected() {
  local file="$1" pattern="$2"
  if "$helm" lint --strict -f "$file" "$chart" >"$work/lint.txt" 2>&1; then
    cat "$work/lint.txt"
    fail "helm lint accepted $(basename "$file")"
  fi
  if "$helm" template "$release" "$chart" -f "$file" >"$work/out.yaml" 2>"$work/template.err"; then
    fail "helm template accepted $(basename "$file")"
  fi
  grep -q "values don't meet the specifications of the schema" "$work/template.err" ||
    { cat "$work/template.err"; fail "rejected, but not by the values schema"; }
  grep -Eq "$pattern" "$work/template.err" ||
    { cat "$work/template.err"; fail "the schema error does not name the mistake ($pattern)"; }
  echo "rejected as expected: $(grep -E "$pattern" "$work/template.err" | head -1 | sed 's/^ *//')"
}

# Expects helm template to fail with a message matching a regex. Usage: expect_failed_render <regex> <helm args...>
expect_failed_render() {
  local pattern="$1"
  shift
  if "$helm" template "$release" "$chart" --namespace "$namespace" "$@" >/dev/null 2>"$work/err.txt"; then
    fail "helm template accepted $*"
  fi
  grep -Eq "$pattern" "$work/err.txt" || { cat "$work/err.txt"; fail "helm template failed, but not with: $pattern"; }
  echo "refused as expected: $pattern"
}

# Expects validate.mjs to fail on a broken rendering, with a message matching a regex.
# Usage: expect_invalid <manifests file> <regex> <validate.mjs expectations...>
expect_invalid() {
  local file="$1" pattern="$2"
  shift 2
  if node "$here/validate.mjs" --node-dir "$node_dir" --chart "$chart" --manifests "$file" \
    --namespace "$namespace" "$@" >"$work/validate.txt" 2>&1; then
    fail "validate.mjs accepted a broken rendering ($pattern)"
  fi
  grep -Eq "$pattern" "$work/validate.txt" || { cat "$work/validate.txt"; fail "validate.mjs failed, but not with $pattern"; }
  echo "caught: $(grep -E "$pattern" "$work/validate.txt" | head -1)"
}

case "$scenario" in
  defaults)
    render_and_validate "" --etcd internal:1 --gpus 0 --autoscaling off --tls off
    ;;
  external_etcd)
    render_and_validate "-f $values/external-etcd.yaml" \
      --etcd "external:http://etcd-a.databases.svc.cluster.local:2379,http://etcd-b.databases.svc.cluster.local:2379,http://etcd-c.databases.svc.cluster.local:2379"
    ;;
  gpus)
    render_and_validate "-f $values/gpus.yaml" --gpus 2
    grep -q 'nvidia.com/gpu.present: "true"' "$work/manifests.yaml" || fail "GPU node selector missing"
    ;;
  autoscaling)
    render_and_validate "-f $values/autoscaling.yaml" --autoscaling on
    ;;
  tls_token)
    openssl req -x509 -newkey rsa:2048 -nodes -days 1 -subj "/CN=kolo" \
      -addext "subjectAltName=DNS:localhost,IP:127.0.0.1" \
      -keyout "$work/tls.key" -out "$work/tls.crt" >/dev/null 2>&1 || fail "openssl could not make a test certificate"
    render_and_validate "-f $values/tls-token.yaml --set-file tls.cert=$work/tls.crt --set-file tls.key=$work/tls.key" \
      --tls on --token kolo-test-token-0123456789abcdef
    # The certificate reaches the Secret byte for byte.
    node -e '
      const { createRequire } = require("node:module");
      const YAML = createRequire(process.argv[1] + "/x.cjs")("yaml");
      const fs = require("node:fs");
      const tls = YAML.parseAllDocuments(fs.readFileSync(process.argv[2], "utf8")).map((d) => d.toJS())
        .find((o) => o && o.kind === "Secret" && o.type === "kubernetes.io/tls");
      const crt = Buffer.from(tls.data["tls.crt"], "base64").toString();
      process.exit(crt === fs.readFileSync(process.argv[3], "utf8") ? 0 : 1);
    ' "$node_dir" "$work/manifests.yaml" "$work/tls.crt" || fail "the TLS Secret does not hold the given certificate"
    ;;
  existing_secrets)
    render_and_validate "-f $values/existing-secrets.yaml" --tls on --existing-secrets kolo-api,kolo-tls
    if grep -q '^kind: Secret' "$work/manifests.yaml"; then fail "the chart made a Secret although both exist"; fi
    ;;
  etcd3)
    render_and_validate "-f $values/etcd3.yaml" --etcd internal:3
    grep -q 'storageClassName: fast-ssd' "$work/manifests.yaml" || fail "etcd storage class not applied"
    ;;
  schema_rejects_wrong_type)
    expect_rejected "$values/bad-wrong-type.yaml" "workers.*replicas|replicas.*(integer|type)"
    ;;
  schema_rejects_unknown_key)
    expect_rejected "$values/bad-unknown-key.yaml" "replica\b.*not allowed|additional propert.*replica|'replica'"
    ;;
  schema_rejects_out_of_range)
    expect_rejected "$values/bad-out-of-range.yaml" "etcd.*replicas|replicas.*(1, 3, 5|enum|one of)"
    expect_rejected "$values/bad-port-range.yaml" "grpcPort.*(65535|maximum)|65535"
    expect_rejected "$values/bad-replicas-range.yaml" "coordinator/replicas.*minimum"
    ;;
  contradictions_rejected)
    # Values each valid alone but contradictory together stop the render with a clear message.
    expect_failed_render "tls.enabled needs tls.cert and tls.key" --set tls.enabled=true
    expect_failed_render "minReplicas must not exceed" --set workers.autoscaling.enabled=true \
      --set workers.autoscaling.minReplicas=5 --set workers.autoscaling.maxReplicas=3
    expect_failed_render "set auth.token or auth.existingSecret, not both" \
      --set auth.token=abcdefghijklmnopqrstuvwxyz --set auth.existingSecret=mine
    expect_failed_render "minAvailable must be below coordinator.replicas" \
      --set coordinator.replicas=2 --set coordinator.podDisruptionBudget.minAvailable=2
    expect_failed_render "etcd.image.tag is required" --set etcd.image.repository=quay.io/coreos/etcd
    ;;
  validator_catches_mistakes)
    # The validator itself must fail on broken renderings, or its passes prove nothing.
    "$helm" template "$release" "$chart" --namespace "$namespace" >"$work/good.yaml"
    sed 's|path: /readyz|path: /ready|' "$work/good.yaml" >"$work/bad.yaml"
    expect_invalid "$work/bad.yaml" "readinessProbe hits /ready,"
    sed 's|containerPort: 8080|containerPort: "8080"|' "$work/good.yaml" >"$work/bad.yaml"
    expect_invalid "$work/bad.yaml" "containerPort must be integer"
    sed "s|$release-kolo-etcd.$namespace.svc|nowhere.$namespace.svc|" "$work/good.yaml" >"$work/bad.yaml"
    expect_invalid "$work/bad.yaml" "etcd Service nowhere is not rendered"
    "$helm" template "$release" "$chart" --namespace "$namespace" --set workers.drain.enabled=false >"$work/bad.yaml"
    expect_invalid "$work/bad.yaml" "no preStop exec hook that drains the worker"
    sed 's|drain "\$KOLO_WORKER_ID"|drain "$POD_IP"|' "$work/good.yaml" >"$work/bad.yaml"
    expect_invalid "$work/bad.yaml" "preStop does not run 'kolo \.\.\. drain <this worker>'"
    "$helm" template "$release" "$chart" --namespace "$namespace" --set workers.gpus=1 >"$work/bad.yaml"
    expect_invalid "$work/bad.yaml" "requests GPUs although none were asked for" --gpus 0
    sed 's|secretName: ci-kolo-auth|secretName: other|' "$work/good.yaml" >"$work/bad.yaml"
    expect_invalid "$work/bad.yaml" "Secret other, which is not rendered"
    sed 's|readOnly: true|readonly: true|' "$work/good.yaml" >"$work/bad.yaml"
    expect_invalid "$work/bad.yaml" 'volumeMounts\[0\]: unknown field "readonly"'
    sed 's|readOnlyRootFilesystem: true|readOnlyRootFilesystem: false|' "$work/good.yaml" >"$work/bad.yaml"
    expect_invalid "$work/bad.yaml" "root file system is writable"
    ;;
  *)
    echo "chart-test: unknown scenario $scenario" >&2
    exit 2
    ;;
esac
echo "PASS $scenario"
