#!/usr/bin/env bash
# One test of the kolo Helm chart: `helm lint --strict` and `helm template` with a value set,
# then validate.mjs over the rendered manifests (Kubernetes schemas + CRDs, kolo's wiring, and
# every flag against the real binaries' --help), or one of the checks below (the schema
# rejects bad values with a message naming the mistake; checksums per component; the worker
# replica count is kept across upgrades; the preStop is fixed text; the TLS names the pods
# use are the ones the docs ask for). Usage: chart-test.sh <scenario>   (see the case below)
set -euo pipefail

here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
root="$(cd "$here/../.." && pwd)"
chart="$root/deploy/helm/kolo"
values="$here/values"
scenario="${1:?usage: chart-test.sh <scenario>}"
namespace="kolo-test"
release="ci"
bin_dir="${KOLO_BIN_DIR:-$root/build/bin}"

mapfile -t tools < <("$here/setup-tools.sh")
helm="${tools[0]}"
node_dir="${tools[1]}"

work="$(mktemp -d "${TMPDIR:-/tmp}/kolo-chart-test.XXXXXX")"
trap 'rm -rf "$work"' EXIT

fail() { echo "FAIL $scenario: $*" >&2; exit 1; }

# A self-signed certificate for the coordinators with the subjectAltNames docs/DEPLOY.md and
# values.yaml ask for. Usage: make_cert <dir>
make_cert() {
  local svc="$release-kolo-coordinator"
  openssl req -x509 -newkey rsa:2048 -nodes -days 1 -subj "/CN=$svc" \
    -addext "subjectAltName=DNS:$svc.$namespace.svc.cluster.local,DNS:$svc.$namespace.svc,DNS:$svc,DNS:localhost,IP:127.0.0.1" \
    -keyout "$1/tls.key" -out "$1/tls.crt" >/dev/null 2>&1 || fail "openssl could not make a test certificate"
}

render() { # render <out file> <helm args...>
  local out="$1"
  shift
  "$helm" template "$release" "$chart" --namespace "$namespace" "$@" >"$out" 2>"$work/template.err" ||
    { cat "$work/template.err"; fail "helm template failed"; }
}

validate() { # validate <manifests> <validate.mjs expectations...>
  local file="$1"
  shift
  node "$here/validate.mjs" --node-dir "$node_dir" --bin-dir "$bin_dir" --manifests "$file" --namespace "$namespace" "$@"
}

# Lints, renders (manifests and NOTES) and validates one value set.
# Usage: render_and_validate "<helm value args>" <validate.mjs expectations...>
render_and_validate() {
  local -a set_args
  read -r -a set_args <<<"$1"
  shift
  "$helm" lint --strict --namespace "$namespace" "${set_args[@]}" "$chart" >"$work/lint.txt" 2>&1 ||
    { cat "$work/lint.txt"; fail "helm lint --strict failed"; }
  render "$work/manifests.yaml" "${set_args[@]}"
  validate "$work/manifests.yaml" "$@" || fail "rendered manifests do not validate"
  # NOTES.txt: how to port-forward, submit with the CLI and query with curl (with the token).
  "$helm" install "$release" "$chart" --namespace "$namespace" --dry-run=client "${set_args[@]}" >"$work/install.txt" 2>&1 ||
    { cat "$work/install.txt"; fail "helm install --dry-run=client failed"; }
  sed -n '/^NOTES:/,$p' "$work/install.txt" >"$work/notes.txt"
  grep -q "port-forward service/$release-kolo-coordinator" "$work/notes.txt" || fail "NOTES do not say how to port-forward"
  grep -q -- "--server 127.0.0.1:[0-9]*.* submit job.json" "$work/notes.txt" || fail "NOTES do not show a submit with the CLI"
  if grep -q -- "--token " "$work/notes.txt"; then fail "NOTES pass the token as a flag (ps shows it)"; fi
  grep -q 'curl .*Authorization: Bearer $KOLO_TOKEN.*/v1/jobs' "$work/notes.txt" || fail "NOTES do not show a curl query of the jobs with the token"
  grep -q 'curl .*Authorization: Bearer $KOLO_TOKEN.*/metrics' "$work/notes.txt" || fail "NOTES curl /metrics without the token (401)"
  if grep -E 'curl [^|]*/metrics' "$work/notes.txt" | grep -vq Authorization; then fail "NOTES curl /metrics without the token"; fi
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
  if validate "$file" "$@" >"$work/validate.txt" 2>&1; then
    fail "validate.mjs accepted a broken rendering ($pattern)"
  fi
  grep -Eq "$pattern" "$work/validate.txt" || { cat "$work/validate.txt"; fail "validate.mjs failed, but not with $pattern"; }
  echo "caught: $(grep -E "$pattern" "$work/validate.txt" | head -1)"
}

# One object of a rendering as JSON (jq-less): obj <manifests> <kind> <name> [path]
obj() {
  node -e '
    const { createRequire } = require("node:module");
    const YAML = createRequire(process.argv[1] + "/x.cjs")("yaml");
    const fs = require("node:fs");
    const [file, kind, name, path] = process.argv.slice(2);
    const o = YAML.parseAllDocuments(fs.readFileSync(file, "utf8")).map((d) => d.toJS())
      .find((x) => x && x.kind === kind && x.metadata.name === name);
    if (!o) { console.error(`no ${kind}/${name}`); process.exit(1); }
    const v = (path || "").split(".").filter(Boolean).reduce((a, k) => (a == null ? a : a[k]), o);
    process.stdout.write(JSON.stringify(v === undefined ? null : v) + "\n");
  ' "$node_dir" "$@"
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
    # NCCL picks its own ports: between GPU workers every port is open, and only between them
    [ "$(obj "$work/manifests.yaml" NetworkPolicy "$release-kolo-worker" spec.ingress.0.ports)" = null ] ||
      fail "GPU workers' NetworkPolicy limits ring traffic to the kolo data-plane port (NCCL needs its own)"
    ;;
  autoscaling)
    render_and_validate "-f $values/autoscaling.yaml" --autoscaling hpa --hpa-metric custom
    ;;
  autoscaling_demand)
    render_and_validate "-f $values/autoscaling-demand.yaml" --autoscaling hpa --monitoring on
    ;;
  autoscaling_keda)
    make_cert "$work"
    render_and_validate "-f $values/autoscaling-keda.yaml --set-file tls.cert=$work/tls.crt --set-file tls.key=$work/tls.key" \
      --autoscaling keda --tls on
    ;;
  tls_token)
    make_cert "$work"
    render_and_validate "-f $values/tls-token.yaml --set-file tls.cert=$work/tls.crt --set-file tls.key=$work/tls.key --set metrics.serviceMonitor.enabled=true --set metrics.podMonitor.enabled=true" \
      --tls on --token kolo-test-token-0123456789abcdef --monitoring on
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
  tls_names)
    # Every name by which the chart's pods and objects call the coordinators is one that the
    # certificate docs/DEPLOY.md asks for has (openssl checks it as a TLS client would).
    make_cert "$work"
    render "$work/m.yaml" --set tls.enabled=true --set-file tls.cert="$work/tls.crt" --set-file tls.key="$work/tls.key" \
      --set workers.autoscaling.enabled=true --set workers.autoscaling.engine=keda --set metrics.serviceMonitor.enabled=true
    names=("$(obj "$work/m.yaml" ConfigMap "$release-kolo-worker-config" data.KOLO_SERVER | tr -d '"' | sed 's/:[0-9]*$//')")
    names+=("$(obj "$work/m.yaml" ScaledObject "$release-kolo-worker" spec.triggers.0.metadata.url | tr -d '"' | sed -E 's|^https://||; s|[:/].*$||')")
    names+=("$(obj "$work/m.yaml" ServiceMonitor "$release-kolo-coordinator" spec.endpoints.0.tlsConfig.serverName | tr -d '"')")
    for name in "${names[@]}"; do
      [ -n "$name" ] && [ "$name" != null ] || fail "no name found in the rendering"
      openssl x509 -in "$work/tls.crt" -noout -checkhost "$name" | grep -q "does match" ||
        fail "the chart calls the coordinators $name, which the documented certificate does not name"
      echo "named by the certificate: $name"
    done
    for doc in "$root/docs/DEPLOY.md" "$chart/values.yaml"; do
      grep -q 'kolo-coordinator.<n[a-z]*>.svc.<clusterDomain>' "$doc" || fail "$(basename "$doc") does not ask for the .svc.<clusterDomain> name the pods use"
    done
    ;;
  existing_secrets)
    render_and_validate "-f $values/existing-secrets.yaml" --tls on --existing-secrets kolo-api,kolo-tls
    if grep -q '^kind: Secret' "$work/manifests.yaml"; then fail "the chart made a Secret although both exist"; fi
    ;;
  etcd3)
    render_and_validate "-f $values/etcd3.yaml" --etcd internal:3
    grep -q 'storageClassName: fast-ssd' "$work/manifests.yaml" || fail "etcd storage class not applied"
    ;;
  etcd_tls_auth)
    render_and_validate "-f $values/etcd-tls-auth.yaml" --etcd internal:3 --etcd-tls on --etcd-auth on \
      --etcd-tls-server kolo-etcd-server --etcd-tls-client kolo-etcd-client
    grep -q 'image: registry.example.com/kolo-cuda:0.1.0-cuda12' "$work/manifests.yaml" || fail "the workers' own image is not used"
    [ "$(obj "$work/manifests.yaml" Deployment "$release-kolo-coordinator" spec.template.spec.containers.0.image)" = '"kolo:0.1.0"' ] ||
      fail "the coordinators do not run kolo's image"
    [ "$(obj "$work/manifests.yaml" StatefulSet "$release-kolo-worker" spec.template.spec.priorityClassName)" = '"training"' ] ||
      fail "workers.priorityClassName not applied"
    grep -q 'mountPath: /data' "$work/manifests.yaml" || fail "workers.extraVolumeMounts not applied"
    ;;
  no_network_policy)
    render_and_validate "--set networkPolicy.enabled=false" --network-policy off
    ;;
  checksums_per_component)
    # A change that concerns one component rolls only that component's pods.
    render "$work/a.yaml"
    render "$work/b.yaml" --set coordinator.httpPort=9090
    [ "$(obj "$work/a.yaml" StatefulSet "$release-kolo-worker" spec.template)" = "$(obj "$work/b.yaml" StatefulSet "$release-kolo-worker" spec.template)" ] ||
      fail "changing the coordinators' HTTP port changes the worker pod template (it would roll every worker)"
    [ "$(obj "$work/a.yaml" Deployment "$release-kolo-coordinator" spec.template)" != "$(obj "$work/b.yaml" Deployment "$release-kolo-coordinator" spec.template)" ] ||
      fail "changing the coordinators' HTTP port does not roll the coordinators"
    render "$work/c.yaml" --set image.tag=0.2.0
    [ "$(obj "$work/a.yaml" StatefulSet "$release-kolo-etcd" spec.template)" = "$(obj "$work/c.yaml" StatefulSet "$release-kolo-etcd" spec.template)" ] ||
      fail "a kolo image bump changes etcd's pod template (it would restart etcd under running jobs)"
    render "$work/d.yaml" --set workers.leaseTtl=20
    [ "$(obj "$work/a.yaml" Deployment "$release-kolo-coordinator" spec.template)" = "$(obj "$work/d.yaml" Deployment "$release-kolo-coordinator" spec.template)" ] ||
      fail "a worker setting rolls the coordinators"
    [ "$(obj "$work/a.yaml" StatefulSet "$release-kolo-worker" spec.template)" != "$(obj "$work/d.yaml" StatefulSet "$release-kolo-worker" spec.template)" ] ||
      fail "a worker setting does not roll the workers"
    render "$work/e.yaml" --set auth.token=another-token-0123456789abcdef
    [ "$(obj "$work/a.yaml" StatefulSet "$release-kolo-worker" spec.template.metadata.annotations)" != "$(obj "$work/e.yaml" StatefulSet "$release-kolo-worker" spec.template.metadata.annotations)" ] ||
      fail "a new token does not roll the workers (their drain hook would use the old one)"
    echo "per-component checksums: coordinator port, image tag, worker setting and token each roll only their own"
    ;;
  prestop_fixed_text)
    # The drain hook is fixed text: no value of any kind reaches the shell command line.
    make_cert "$work"
    render "$work/a.yaml"
    render "$work/b.yaml" --set workers.drain.timeoutSeconds=9 --set coordinator.grpcPort=7443 --set tls.enabled=true \
      --set-file tls.cert="$work/tls.crt" --set-file tls.key="$work/tls.key" --set fullnameOverride='odd-name'
    a="$(obj "$work/a.yaml" StatefulSet "$release-kolo-worker" spec.template.spec.containers.0.lifecycle.preStop)"
    b="$(obj "$work/b.yaml" StatefulSet "odd-name-worker" spec.template.spec.containers.0.lifecycle.preStop)"
    [ "$a" = "$b" ] || fail "the preStop command changes with values: $a vs $b"
    echo "preStop: $a"
    ;;
  replicas_kept)
    # kolo.replicasFor, the worker count a render gives the StatefulSet, against made-up live
    # objects (what `lookup` returns on an upgrade): a test chart that includes the kolo chart.
    mkdir -p "$work/rc/charts" "$work/rc/templates"
    cp -r "$chart" "$work/rc/charts/kolo"
    printf 'apiVersion: v2\nname: replicas-cases\nversion: 0.0.1\ndependencies:\n  - name: kolo\n    version: "*"\n' >"$work/rc/Chart.yaml"
    cat >"$work/rc/templates/cases.yaml" <<'EOF'
{{- define "case" -}}
{{- $live := dict -}}
{{- if ne .live "none" -}}
{{- $live = dict "spec" (dict "replicas" (int .live)) "metadata" (dict "annotations" (dict "kolo-chart/workers-replicas" .rendered)) -}}
{{- end -}}
{{- $values := dict "replicas" (int .replicas) "autoscaling" (dict "enabled" .auto "minReplicas" 2) -}}
{{ .name }}: {{ include "kolo.replicasFor" (dict "live" $live "values" $values) | quote }}
{{ end -}}
apiVersion: v1
kind: ConfigMap
metadata:
  name: cases
data:
{{- range (list
  (dict "name" "install" "live" "none" "rendered" "" "replicas" 3 "auto" false)
  (dict "name" "upgrade-after-kubectl-scale" "live" "8" "rendered" "3" "replicas" 3 "auto" false)
  (dict "name" "upgrade-with-a-new-count" "live" "8" "rendered" "3" "replicas" 5 "auto" false)
  (dict "name" "autoscaler-switched-on" "live" "6" "rendered" "3" "replicas" 3 "auto" true)
  (dict "name" "install-with-autoscaler" "live" "none" "rendered" "" "replicas" 3 "auto" true)
  (dict "name" "autoscaler-switched-off" "live" "7" "rendered" "3" "replicas" 3 "auto" false)
  (dict "name" "live-at-zero" "live" "0" "rendered" "3" "replicas" 3 "auto" false)
) }}
  {{- include "case" . | nindent 2 }}
{{- end }}
EOF
    "$helm" template rc "$work/rc" --namespace "$namespace" >"$work/rc.yaml" 2>"$work/rc.err" || { cat "$work/rc.err"; fail "the test chart does not render"; }
    want='install=3 upgrade-after-kubectl-scale=8 upgrade-with-a-new-count=5 autoscaler-switched-on=6 install-with-autoscaler=2 autoscaler-switched-off=7 live-at-zero=0'
    for pair in $want; do
      grep -q "^  ${pair%%=*}: \"${pair#*=}\"$" "$work/rc.yaml" || { cat "$work/rc.yaml"; fail "replicas: want ${pair}"; }
    done
    echo "worker replicas: $want"
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
    expect_rejected "$values/bad-grace.yaml" "terminationGracePeriodSeconds.*minimum"
    expect_rejected "$values/bad-drain-timeout.yaml" "timeoutSeconds.*maximum"
    ;;
  contradictions_rejected)
    # Values each valid alone but contradictory together stop the render with a clear message.
    expect_failed_render "tls.enabled needs tls.cert and tls.key" --set tls.enabled=true
    expect_failed_render "minReplicas must not exceed" --set workers.autoscaling.enabled=true \
      --set workers.autoscaling.minReplicas=5 --set workers.autoscaling.maxReplicas=3
    expect_failed_render "minReplicas 0 needs engine keda" --set workers.autoscaling.enabled=true --set workers.autoscaling.minReplicas=0
    expect_failed_render "set auth.token or auth.existingSecret, not both" \
      --set auth.token=abcdefghijklmnopqrstuvwxyz --set auth.existingSecret=mine
    expect_failed_render "minAvailable must be below coordinator.replicas" \
      --set coordinator.replicas=2 --set coordinator.podDisruptionBudget.minAvailable=2
    expect_failed_render "quotaBackendBytes .* does not fit etcd.persistence.size" \
      --set etcd.persistence.size=1Gi --set etcd.quotaBackendBytes=2147483648
    expect_failed_render "etcd.tls.enabled needs etcd.tls.clientSecret" --set etcd.tls.enabled=true
    expect_failed_render "needs etcd.tls.serverSecret" --set etcd.tls.enabled=true --set etcd.tls.clientSecret=c
    expect_failed_render "external endpoint http://e:2379 is not https" --set etcd.tls.enabled=true \
      --set etcd.tls.clientSecret=c --set 'etcd.external.endpoints[0]=http://e:2379'
    expect_failed_render "needs etcd.auth.existingSecret" --set etcd.auth.enabled=true --set 'etcd.external.endpoints[0]=http://e:2379'
    ;;
  validator_catches_mistakes)
    # The validator itself must fail on broken renderings, or its passes prove nothing.
    render "$work/good.yaml"
    validate "$work/good.yaml" >/dev/null || fail "the default rendering does not validate"
    sed 's|path: /readyz|path: /ready|' "$work/good.yaml" >"$work/bad.yaml"
    expect_invalid "$work/bad.yaml" "readinessProbe hits /ready,"
    sed 's|containerPort: 8080|containerPort: "8080"|' "$work/good.yaml" >"$work/bad.yaml"
    expect_invalid "$work/bad.yaml" "containerPort must be integer"
    sed "s|$release-kolo-etcd.$namespace.svc|nowhere.$namespace.svc|" "$work/good.yaml" >"$work/bad.yaml"
    expect_invalid "$work/bad.yaml" "etcd Service nowhere is not rendered"
    render "$work/bad.yaml" --set workers.drain.enabled=false
    expect_invalid "$work/bad.yaml" "no preStop exec hook that drains the worker"
    sed 's|drain "\$KOLO_WORKER_ID"|drain "$POD_IP"|' "$work/good.yaml" >"$work/bad.yaml"
    expect_invalid "$work/bad.yaml" "preStop does not run 'kolo \.\.\. drain <this worker>'"
    render "$work/bad.yaml" --set workers.gpus=1
    expect_invalid "$work/bad.yaml" "requests GPUs although none were asked for" --gpus 0
    sed 's|secretName: ci-kolo-auth|secretName: other|' "$work/good.yaml" >"$work/bad.yaml"
    expect_invalid "$work/bad.yaml" "Secret other, which is not rendered"
    sed 's|readOnly: true|readonly: true|' "$work/good.yaml" >"$work/bad.yaml"
    expect_invalid "$work/bad.yaml" 'volumeMounts\[0\]: unknown field "readonly"'
    sed 's|readOnlyRootFilesystem: true|readOnlyRootFilesystem: false|' "$work/good.yaml" >"$work/bad.yaml"
    expect_invalid "$work/bad.yaml" "root file system is writable"
    # a flag the binary does not have (a rename in the chart, or an old image)
    sed 's|- --http-listen|- --health-listen|' "$work/good.yaml" >"$work/bad.yaml"
    expect_invalid "$work/bad.yaml" "kolo-worker has no flag --health-listen"
    sed 's|- --quota-backend-bytes=|- --quota-bytes=|' "$work/good.yaml" >"$work/bad.yaml"
    expect_invalid "$work/bad.yaml" "etcd has no flag --quota-bytes"
    sed 's|exec kolo --server|exec kolo --srv|' "$work/good.yaml" >"$work/bad.yaml"
    expect_invalid "$work/bad.yaml" "preStop runs kolo --srv"
    # readiness that is not the worker's registration
    sed 's|path: /readyz\(.*\)|path: /healthz\1|' "$work/good.yaml" >"$work/bad.yaml"
    expect_invalid "$work/bad.yaml" "readinessProbe hits /healthz on health, want /readyz"
    # etcd open to every pod / workers' data plane open to every pod
    node -e '
      const { createRequire } = require("node:module");
      const YAML = createRequire(process.argv[1] + "/x.cjs")("yaml");
      const fs = require("node:fs");
      const docs = YAML.parseAllDocuments(fs.readFileSync(process.argv[2], "utf8")).map((d) => d.toJS()).filter(Boolean);
      for (const o of docs) if (o.kind === "NetworkPolicy" && o.metadata.name === process.argv[3]) delete o.spec.ingress[0].from;
      fs.writeFileSync(process.argv[4], docs.map((o) => YAML.stringify(o)).join("---\n"));
    ' "$node_dir" "$work/good.yaml" "$release-kolo-etcd" "$work/bad.yaml"
    expect_invalid "$work/bad.yaml" "any pod can reach etcd's client port"
    sed "s|name: $release-kolo-etcd$|name: $release-kolo-etcd-off|" "$work/good.yaml" |
      awk -v n="$release-kolo-etcd-off" 'BEGIN{RS="---\n"; ORS="---\n"} !($0 ~ "kind: NetworkPolicy" && $0 ~ n)' >"$work/bad.yaml"
    expect_invalid "$work/bad.yaml" "no NetworkPolicy for etcd"
    # the workers' log server on a random port (no policy can name it), or closed to the coordinators
    sed '/- --logs-listen/,+1d' "$work/good.yaml" >"$work/bad.yaml"
    expect_invalid "$work/bad.yaml" "logs-listen \(none: a random port\) is not 0.0.0.0"
    sed '/job logs: only the coordinators/,/port: logs/{/matchLabels:/,/component: coordinator/s/component: coordinator/component: nobody/}' \
      "$work/good.yaml" >"$work/bad.yaml"
    expect_invalid "$work/bad.yaml" "the coordinators cannot fetch job logs"
    # etcd back on kolo's image
    sed 's|image: registry.k8s.io/etcd:.*|image: kolo:0.1.0|' "$work/good.yaml" >"$work/bad.yaml"
    expect_invalid "$work/bad.yaml" "etcd runs kolo's image"
    # an upgrade that drops the replica count
    sed '/kolo-chart\/workers-replicas/,/replicas:/{/^  replicas:/d}' "$work/good.yaml" >"$work/bad.yaml"
    expect_invalid "$work/bad.yaml" "ci-kolo-worker: no replica count"
    # CRDs: an unknown field inside a ScaledObject
    render "$work/keda.yaml" --set workers.autoscaling.enabled=true --set workers.autoscaling.engine=keda
    sed 's|valueLocation: workers_wanted|valueLocation: workers_wanted\n        valueLocaton: x|; s|cooldownPeriod:|cooldownPeriodd:|' "$work/keda.yaml" >"$work/bad.yaml"
    expect_invalid "$work/bad.yaml" 'ScaledObject/ci-kolo-worker.spec: unknown field "cooldownPeriodd"' --autoscaling keda
    sed 's|path: /v1/demand|path: /v1/jobs|; s|/v1/demand"|/v1/jobs"|' "$work/keda.yaml" >"$work/bad.yaml"
    expect_invalid "$work/bad.yaml" "is not the coordinators' /v1/demand" --autoscaling keda
    ;;
  *)
    echo "chart-test: unknown scenario $scenario" >&2
    exit 2
    ;;
esac
echo "PASS $scenario"
