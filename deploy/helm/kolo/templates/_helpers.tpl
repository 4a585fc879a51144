{{/*
Names, labels and derived settings shared by every template of the kolo chart.
Everything that more than one template needs to agree on (service names, the etcd URL,
secret names, mount paths, the etcd client flags) is computed here once. The programs'
flags and routes are written in the templates, never taken from values: they belong to
the image version (tests/deploy checks them against each binary's --help).
*/}}

{{/* The chart's short name. */}}
{{- define "kolo.name" -}}
{{- default .Chart.Name .Values.nameOverride | trunc 63 | trimSuffix "-" -}}
{{- end -}}

{{/* The release's full name, the prefix of every object (kept short enough for suffixes). */}}
{{- define "kolo.fullname" -}}
{{- if .Values.fullnameOverride -}}
{{- .Values.fullnameOverride | trunc 40 | trimSuffix "-" -}}
{{- else -}}
{{- $name := default .Chart.Name .Values.nameOverride -}}
{{- if contains $name .Release.Name -}}
{{- .Release.Name | trunc 40 | trimSuffix "-" -}}
{{- else -}}
{{- printf "%s-%s" .Release.Name $name | trunc 40 | trimSuffix "-" -}}
{{- end -}}
{{- end -}}
{{- end -}}

{{/* Labels of every object. */}}
{{- define "kolo.labels" -}}
helm.sh/chart: {{ printf "%s-%s" .Chart.Name .Chart.Version | replace "+" "_" }}
app.kubernetes.io/name: {{ include "kolo.name" . }}
app.kubernetes.io/instance: {{ .Release.Name }}
app.kubernetes.io/version: {{ .Chart.AppVersion | quote }}
app.kubernetes.io/managed-by: {{ .Release.Service }}
{{- with .Values.commonLabels }}
{{ toYaml . }}
{{- end }}
{{- end -}}

{{/* Selector labels of one component: call with (dict "ctx" $ "component" "worker"). */}}
{{- define "kolo.selectorLabels" -}}
app.kubernetes.io/name: {{ include "kolo.name" .ctx }}
app.kubernetes.io/instance: {{ .ctx.Release.Name }}
app.kubernetes.io/component: {{ .component }}
{{- end -}}

{{/* Object names of each component. */}}
{{- define "kolo.etcdName" -}}{{ include "kolo.fullname" . }}-etcd{{- end -}}
{{- define "kolo.etcdPeerServiceName" -}}{{ include "kolo.fullname" . }}-etcd-peer{{- end -}}
{{- define "kolo.coordinatorName" -}}{{ include "kolo.fullname" . }}-coordinator{{- end -}}
{{- define "kolo.workerName" -}}{{ include "kolo.fullname" . }}-worker{{- end -}}
{{- define "kolo.coordinatorConfigName" -}}{{ include "kolo.fullname" . }}-coordinator-config{{- end -}}
{{- define "kolo.workerConfigName" -}}{{ include "kolo.fullname" . }}-worker-config{{- end -}}
{{- define "kolo.etcdBackupName" -}}{{ include "kolo.fullname" . }}-etcd-backup{{- end -}}
{{- define "kolo.etcdAuthJobName" -}}{{ include "kolo.fullname" . }}-etcd-auth{{- end -}}

{{/* The ServiceAccount the pods run as. */}}
{{- define "kolo.serviceAccountName" -}}
{{- if .Values.serviceAccount.create -}}
{{- default (include "kolo.fullname" .) .Values.serviceAccount.name -}}
{{- else -}}
{{- default "default" .Values.serviceAccount.name -}}
{{- end -}}
{{- end -}}

{{/* The kolo image reference (coordinators, the chart's jobs). */}}
{{- define "kolo.image" -}}
{{- printf "%s:%s" .Values.image.repository (default .Chart.AppVersion .Values.image.tag) -}}
{{- end -}}

{{/* The workers' image: their own when given (a GPU build), otherwise kolo's. */}}
{{- define "kolo.workerImage" -}}
{{- $w := .Values.workers.image -}}
{{- if $w.repository -}}
{{- printf "%s:%s" $w.repository (default .Chart.AppVersion $w.tag) -}}
{{- else -}}
{{- include "kolo.image" . -}}
{{- end -}}
{{- end -}}

{{- define "kolo.workerPullPolicy" -}}
{{- default .Values.image.pullPolicy .Values.workers.image.pullPolicy -}}
{{- end -}}

{{/* etcd's image (never kolo's by default, so a kolo upgrade leaves etcd running). */}}
{{- define "kolo.etcdImage" -}}
{{- printf "%s:%s" .Values.etcd.image.repository .Values.etcd.image.tag -}}
{{- end -}}

{{/* true when the chart runs its own etcd. */}}
{{- define "kolo.etcdInternal" -}}
{{- if not .Values.etcd.external.endpoints -}}true{{- end -}}
{{- end -}}

{{/* http or https for the chart's own etcd. */}}
{{- define "kolo.etcdScheme" -}}
{{- if .Values.etcd.tls.enabled -}}https{{- else -}}http{{- end -}}
{{- end -}}

{{/* The etcd client URLs every kolo pod is given (comma-separated). */}}
{{- define "kolo.etcdEndpoints" -}}
{{- if .Values.etcd.external.endpoints -}}
{{- join "," .Values.etcd.external.endpoints -}}
{{- else -}}
{{- printf "%s://%s.%s.svc.%s:%d" (include "kolo.etcdScheme" .) (include "kolo.etcdName" .) .Release.Namespace .Values.clusterDomain (int .Values.etcd.clientPort) -}}
{{- end -}}
{{- end -}}

{{/* The Secret holding the API token. */}}
{{- define "kolo.authSecretName" -}}
{{- default (printf "%s-auth" (include "kolo.fullname" .)) .Values.auth.existingSecret -}}
{{- end -}}

{{/* The Secret holding tls.crt and tls.key. */}}
{{- define "kolo.tlsSecretName" -}}
{{- default (printf "%s-tls" (include "kolo.fullname" .)) .Values.tls.existingSecret -}}
{{- end -}}

{{/* The Secret holding etcd's root-password and the kolo user's password. */}}
{{- define "kolo.etcdAuthSecretName" -}}
{{- default (printf "%s-etcd-auth" (include "kolo.fullname" .)) .Values.etcd.auth.existingSecret -}}
{{- end -}}

{{/*
A secret value for a chart-made Secret: the value given, else the one already stored in
the cluster under key (so upgrades keep it), else a fresh random one. Call with
(dict "ctx" $ "given" "..." "secret" "<name>" "key" "<key>").
*/}}
{{- define "kolo.keptSecret" -}}
{{- if .given -}}
{{- .given -}}
{{- else -}}
{{- $old := lookup "v1" "Secret" .ctx.Release.Namespace .secret -}}
{{- if and $old $old.data (hasKey $old.data .key) -}}
{{- index $old.data .key | b64dec -}}
{{- else -}}
{{- randAlphaNum 40 -}}
{{- end -}}
{{- end -}}
{{- end -}}

{{/* Bytes in a Kubernetes quantity (8Gi, 500M, 1073741824). */}}
{{- define "kolo.bytes" -}}
{{- $q := toString . -}}
{{- $units := dict "Ki" 1024 "Mi" 1048576 "Gi" 1073741824 "Ti" 1099511627776 "k" 1000 "M" 1000000 "G" 1000000000 "T" 1000000000000 -}}
{{- $unit := regexFind "[A-Za-z]+$" $q -}}
{{- mulf (trimSuffix $unit $q | float64) (default 1 (get $units $unit)) | int64 -}}
{{- end -}}

{{/* Stops the render with a clear message when settings contradict each other. */}}
{{- define "kolo.validate" -}}
{{- if and .Values.tls.enabled (not .Values.tls.existingSecret) (or (not .Values.tls.cert) (not .Values.tls.key)) -}}
{{- fail "tls.enabled needs tls.cert and tls.key, or tls.existingSecret" -}}
{{- end -}}
{{- $as := .Values.workers.autoscaling -}}
{{- if and $as.enabled (gt (int $as.minReplicas) (int $as.maxReplicas)) -}}
{{- fail "workers.autoscaling.minReplicas must not exceed workers.autoscaling.maxReplicas" -}}
{{- end -}}
{{- if and $as.enabled (eq $as.engine "hpa") (lt (int $as.minReplicas) 1) -}}
{{- fail "workers.autoscaling.minReplicas 0 needs engine keda (a HorizontalPodAutoscaler keeps at least 1)" -}}
{{- end -}}
{{- $coord := .Values.coordinator -}}
{{- if and $coord.podDisruptionBudget.enabled (gt (int $coord.replicas) 1) (ge (int $coord.podDisruptionBudget.minAvailable) (int $coord.replicas)) -}}
{{- fail "coordinator.podDisruptionBudget.minAvailable must be below coordinator.replicas, or no node could ever be drained" -}}
{{- end -}}
{{- if and .Values.auth.token .Values.auth.existingSecret -}}
{{- fail "set auth.token or auth.existingSecret, not both" -}}
{{- end -}}
{{- $w := .Values.workers -}}
{{- if lt (int $w.terminationGracePeriodSeconds) (add (int $w.drain.timeoutSeconds) 20) -}}
{{- fail (printf "workers.terminationGracePeriodSeconds %d is shorter than the drain needs: drain.timeoutSeconds (%d) + 15 s for the job to let the worker go + 5 s to stop" (int $w.terminationGracePeriodSeconds) (int $w.drain.timeoutSeconds)) -}}
{{- end -}}
{{- $e := .Values.etcd -}}
{{- if and (include "kolo.etcdInternal" .) $e.persistence.enabled (gt (include "kolo.bytes" $e.quotaBackendBytes | int64) (include "kolo.bytes" $e.persistence.size | int64)) -}}
{{- fail (printf "etcd.quotaBackendBytes (%v) does not fit etcd.persistence.size (%s)" $e.quotaBackendBytes $e.persistence.size) -}}
{{- end -}}
{{- if and $e.tls.enabled (not $e.tls.clientSecret) -}}
{{- fail "etcd.tls.enabled needs etcd.tls.clientSecret (the client certificate kolo presents)" -}}
{{- end -}}
{{- if and $e.tls.enabled (include "kolo.etcdInternal" .) (not $e.tls.serverSecret) -}}
{{- fail "etcd.tls.enabled needs etcd.tls.serverSecret for the chart's own etcd" -}}
{{- end -}}
{{- if and $e.auth.enabled (not (include "kolo.etcdInternal" .)) (not $e.auth.existingSecret) -}}
{{- fail "etcd.auth.enabled with external endpoints needs etcd.auth.existingSecret (key password)" -}}
{{- end -}}
{{- range $e.external.endpoints -}}
{{- if and $e.tls.enabled (not (hasPrefix "https://" .)) -}}
{{- fail (printf "etcd.tls.enabled, but the external endpoint %s is not https://" .) -}}
{{- end -}}
{{- end -}}
{{- end -}}

{{/* Mount paths of the secrets inside kolo pods. */}}
{{- define "kolo.tokenFile" -}}/etc/kolo/auth/token{{- end -}}
{{- define "kolo.tlsCertFile" -}}/etc/kolo/tls/tls.crt{{- end -}}
{{- define "kolo.tlsKeyFile" -}}/etc/kolo/tls/tls.key{{- end -}}
{{- define "kolo.tlsCaFile" -}}/etc/kolo/tls/ca.crt{{- end -}}
{{- define "kolo.etcdTlsDir" -}}/etc/kolo/etcd-tls{{- end -}}
{{- define "kolo.etcdPasswordFile" -}}/etc/kolo/etcd-auth/password{{- end -}}

{{/* Scheme of the coordinator's HTTP listener. */}}
{{- define "kolo.httpScheme" -}}
{{- if and .Values.tls.enabled .Values.tls.http -}}HTTPS{{- else -}}HTTP{{- end -}}
{{- end -}}

{{/* The coordinators' Service as the pods of the chart call it. */}}
{{- define "kolo.coordinatorHost" -}}
{{- printf "%s.%s.svc.%s" (include "kolo.coordinatorName" .) .Release.Namespace .Values.clusterDomain -}}
{{- end -}}

{{/*
The flags with which kolo-server and kolo-worker reach etcd over TLS and with a password
(a YAML list of args). Empty when neither is on.
*/}}
{{- define "kolo.etcdClientArgs" -}}
{{- if .Values.etcd.tls.enabled }}
- --etcd-ca
- {{ printf "%s/ca.crt" (include "kolo.etcdTlsDir" .) | quote }}
- --etcd-cert
- {{ printf "%s/tls.crt" (include "kolo.etcdTlsDir" .) | quote }}
- --etcd-key
- {{ printf "%s/tls.key" (include "kolo.etcdTlsDir" .) | quote }}
{{- end }}
{{- if .Values.etcd.auth.enabled }}
- --etcd-user
- {{ .Values.etcd.auth.user | quote }}
- --etcd-password-file
- {{ include "kolo.etcdPasswordFile" . | quote }}
{{- end }}
{{- end -}}

{{/*
Checksums that roll a component's pods when what they consume changes, and only then:
call with (dict "ctx" $ "config" "<its ConfigMap template>" "secrets" (list ...)).
*/}}
{{- define "kolo.checksums" -}}
checksum/config: {{ include (print .ctx.Template.BasePath "/" .config) .ctx | sha256sum }}
checksum/secret: {{ toJson .secrets | sha256sum }}
{{- end -}}

{{/* The secret values each component consumes (for its checksum). */}}
{{- define "kolo.secretInputs" -}}
{{- $v := .ctx.Values -}}
{{- $in := dict "auth" $v.auth "etcdTls" $v.etcd.tls "etcdAuth" (omit $v.etcd.auth "user") -}}
{{- if $v.tls.enabled -}}
{{- if eq .component "coordinator" -}}
{{- $_ := set $in "tls" $v.tls -}}
{{- else -}}
{{- $_ := set $in "tlsCa" (list $v.tls.existingSecret $v.tls.caKey (ternary $v.tls.cert "" (eq $v.tls.caKey "tls.crt"))) -}}
{{- end -}}
{{- end -}}
{{- toJson $in -}}
{{- end -}}

{{/* Pod-level settings every kolo pod shares: call with (dict "ctx" $ "priorityClassName" "..."). */}}
{{- define "kolo.podCommon" -}}
serviceAccountName: {{ include "kolo.serviceAccountName" .ctx }}
automountServiceAccountToken: {{ .ctx.Values.serviceAccount.automountToken }}
{{- with .priorityClassName }}
priorityClassName: {{ . }}
{{- end }}
{{- with .ctx.Values.imagePullSecrets }}
imagePullSecrets:
  {{- toYaml . | nindent 2 }}
{{- end }}
securityContext:
  {{- toYaml .ctx.Values.podSecurityContext | nindent 2 }}
{{- end -}}

{{/* Environment every kolo container shares: who it is, and where its secrets are. */}}
{{- define "kolo.envCommon" -}}
- name: POD_NAME
  valueFrom:
    fieldRef:
      fieldPath: metadata.name
- name: POD_NAMESPACE
  valueFrom:
    fieldRef:
      fieldPath: metadata.namespace
- name: POD_IP
  valueFrom:
    fieldRef:
      fieldPath: status.podIP
- name: KOLO_TOKEN_FILE
  value: {{ include "kolo.tokenFile" . }}
{{- if .Values.tls.enabled }}
- name: KOLO_TLS_CA
  value: {{ include "kolo.tlsCaFile" . }}
{{- end }}
{{- end -}}

{{/*
Secret volumes (token, TLS, etcd client certificate and password) and /tmp for every kolo
pod: call with (dict "ctx" $ "withKey" true) for the coordinators (certificate and key);
the others get only the CA clients trust.
*/}}
{{- define "kolo.volumesCommon" -}}
{{- $v := .ctx.Values -}}
- name: auth
  secret:
    secretName: {{ include "kolo.authSecretName" .ctx }}
    defaultMode: 288 # 0440: owner and fsGroup may read
    items:
      - key: {{ $v.auth.tokenKey }}
        path: token
{{- if $v.tls.enabled }}
- name: tls
  secret:
    secretName: {{ include "kolo.tlsSecretName" .ctx }}
    defaultMode: 288
    items:
      {{- if .withKey }}
      - key: tls.crt
        path: tls.crt
      - key: tls.key
        path: tls.key
      {{- end }}
      - key: {{ $v.tls.caKey }}
        path: ca.crt
{{- end }}
{{- include "kolo.etcdClientVolumes" .ctx }}
- name: tmp
  emptyDir: {}
{{- end -}}

{{/* The etcd client certificate and password volumes (for kolo pods and the chart's jobs). */}}
{{- define "kolo.etcdClientVolumes" -}}
{{- if .Values.etcd.tls.enabled }}
- name: etcd-tls
  secret:
    secretName: {{ .Values.etcd.tls.clientSecret }}
    defaultMode: 288
    items:
      - key: ca.crt
        path: ca.crt
      - key: tls.crt
        path: tls.crt
      - key: tls.key
        path: tls.key
{{- end }}
{{- if .Values.etcd.auth.enabled }}
- name: etcd-auth
  secret:
    secretName: {{ include "kolo.etcdAuthSecretName" . }}
    defaultMode: 288
    items:
      - key: password
        path: password
{{- end }}
{{- end -}}

{{- define "kolo.etcdClientVolumeMounts" -}}
{{- if .Values.etcd.tls.enabled }}
- name: etcd-tls
  mountPath: {{ include "kolo.etcdTlsDir" . }}
  readOnly: true
{{- end }}
{{- if .Values.etcd.auth.enabled }}
- name: etcd-auth
  mountPath: /etc/kolo/etcd-auth
  readOnly: true
{{- end }}
{{- end -}}

{{- define "kolo.volumeMountsCommon" -}}
- name: auth
  mountPath: /etc/kolo/auth
  readOnly: true
{{- if .Values.tls.enabled }}
- name: tls
  mountPath: /etc/kolo/tls
  readOnly: true
{{- end }}
{{- include "kolo.etcdClientVolumeMounts" . }}
- name: tmp
  mountPath: /tmp
{{- end -}}

{{/* A topologySpreadConstraints list: call with (dict "ctx" $ "component" "worker" "spread" .Values.workers.topologySpread). */}}
{{- define "kolo.topologySpread" -}}
{{- if .spread.enabled }}
topologySpreadConstraints:
  - maxSkew: {{ .spread.maxSkew }}
    topologyKey: {{ .spread.topologyKey }}
    whenUnsatisfiable: {{ .spread.whenUnsatisfiable }}
    labelSelector:
      matchLabels:
        {{- include "kolo.selectorLabels" (dict "ctx" .ctx "component" .component) | nindent 8 }}
{{- end }}
{{- end -}}

{{/*
The worker StatefulSet's replica count. It never drops a live count: with autoscaling on it
keeps what the autoscaler set (minReplicas at install), and without it a `kubectl scale`
survives `helm upgrade` until workers.replicas itself changes (the StatefulSet remembers,
in an annotation, the workers.replicas it was last rendered with). A pure function of the
live object, called with (dict "live" <StatefulSet or empty> "values" .Values.workers), so
tests/deploy can pin it down with made-up live objects.
*/}}
{{- define "kolo.replicasFor" -}}
{{- $live := .live | default dict -}}
{{- $spec := $live.spec | default dict -}}
{{- $has := hasKey $spec "replicas" -}}
{{- $annotations := ($live.metadata | default dict).annotations | default dict -}}
{{- if .values.autoscaling.enabled -}}
{{- if $has -}}{{ $spec.replicas }}{{- else -}}{{ .values.autoscaling.minReplicas }}{{- end -}}
{{- else if and $has (eq (toString (get $annotations "kolo-chart/workers-replicas")) (toString .values.replicas)) -}}
{{- $spec.replicas -}}
{{- else -}}
{{- .values.replicas -}}
{{- end -}}
{{- end -}}

{{- define "kolo.workerReplicas" -}}
{{- $live := lookup "apps/v1" "StatefulSet" .Release.Namespace (include "kolo.workerName" .) -}}
{{- include "kolo.replicasFor" (dict "live" $live "values" .Values.workers) -}}
{{- end -}}
