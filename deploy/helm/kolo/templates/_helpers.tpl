{{/*
Names, labels and derived settings shared by every template of the kolo chart.
Everything that more than one template needs to agree on (service names, the etcd URL,
secret names) is computed here once.
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
{{- define "kolo.configName" -}}{{ include "kolo.fullname" . }}-config{{- end -}}

{{/* The ServiceAccount the pods run as. */}}
{{- define "kolo.serviceAccountName" -}}
{{- if .Values.serviceAccount.create -}}
{{- default (include "kolo.fullname" .) .Values.serviceAccount.name -}}
{{- else -}}
{{- default "default" .Values.serviceAccount.name -}}
{{- end -}}
{{- end -}}

{{/* The kolo image reference. */}}
{{- define "kolo.image" -}}
{{- printf "%s:%s" .Values.image.repository (default .Chart.AppVersion .Values.image.tag) -}}
{{- end -}}

{{/* The etcd image: its own when given, otherwise kolo's (which carries etcd). */}}
{{- define "kolo.etcdImage" -}}
{{- if .Values.etcd.image.repository -}}
{{- printf "%s:%s" .Values.etcd.image.repository (required "etcd.image.tag is required with etcd.image.repository" .Values.etcd.image.tag) -}}
{{- else -}}
{{- include "kolo.image" . -}}
{{- end -}}
{{- end -}}

{{- define "kolo.etcdPullPolicy" -}}
{{- default .Values.image.pullPolicy .Values.etcd.image.pullPolicy -}}
{{- end -}}

{{/* true when the chart runs its own etcd. */}}
{{- define "kolo.etcdInternal" -}}
{{- if not .Values.etcd.external.endpoints -}}true{{- end -}}
{{- end -}}

{{/* The etcd client URLs every kolo pod is given (comma-separated). */}}
{{- define "kolo.etcdEndpoints" -}}
{{- if .Values.etcd.external.endpoints -}}
{{- join "," .Values.etcd.external.endpoints -}}
{{- else -}}
{{- printf "http://%s.%s.svc.%s:%d" (include "kolo.etcdName" .) .Release.Namespace .Values.clusterDomain (int .Values.etcd.clientPort) -}}
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

{{/*
The API token for a chart-made Secret: the value given, else the one already stored in
the cluster (so upgrades keep it), else a fresh random one.
*/}}
{{- define "kolo.token" -}}
{{- if .Values.auth.token -}}
{{- .Values.auth.token -}}
{{- else -}}
{{- $old := lookup "v1" "Secret" .Release.Namespace (include "kolo.authSecretName" .) -}}
{{- if and $old $old.data (hasKey $old.data .Values.auth.tokenKey) -}}
{{- index $old.data .Values.auth.tokenKey | b64dec -}}
{{- else -}}
{{- randAlphaNum 40 -}}
{{- end -}}
{{- end -}}
{{- end -}}

{{/* Stops the render with a clear message when settings contradict each other. */}}
{{- define "kolo.validate" -}}
{{- if and .Values.tls.enabled (not .Values.tls.existingSecret) (or (not .Values.tls.cert) (not .Values.tls.key)) -}}
{{- fail "tls.enabled needs tls.cert and tls.key, or tls.existingSecret" -}}
{{- end -}}
{{- if and .Values.workers.autoscaling.enabled (gt (int .Values.workers.autoscaling.minReplicas) (int .Values.workers.autoscaling.maxReplicas)) -}}
{{- fail "workers.autoscaling.minReplicas must not exceed workers.autoscaling.maxReplicas" -}}
{{- end -}}
{{- $coord := .Values.coordinator -}}
{{- if and $coord.podDisruptionBudget.enabled (gt (int $coord.replicas) 1) (ge (int $coord.podDisruptionBudget.minAvailable) (int $coord.replicas)) -}}
{{- fail "coordinator.podDisruptionBudget.minAvailable must be below coordinator.replicas, or no node could ever be drained" -}}
{{- end -}}
{{- if and .Values.auth.token .Values.auth.existingSecret -}}
{{- fail "set auth.token or auth.existingSecret, not both" -}}
{{- end -}}
{{- end -}}

{{/* Mount paths of the secrets inside kolo pods. */}}
{{- define "kolo.tokenFile" -}}/etc/kolo/auth/token{{- end -}}
{{- define "kolo.tlsCertFile" -}}/etc/kolo/tls/tls.crt{{- end -}}
{{- define "kolo.tlsKeyFile" -}}/etc/kolo/tls/tls.key{{- end -}}
{{- define "kolo.tlsCaFile" -}}/etc/kolo/tls/ca.crt{{- end -}}

{{/* Scheme of the coordinator's HTTP listener. */}}
{{- define "kolo.httpScheme" -}}
{{- if and .Values.tls.enabled .Values.tls.http -}}HTTPS{{- else -}}HTTP{{- end -}}
{{- end -}}

{{/* Rolls pods when settings or secrets given through values change. */}}
{{- define "kolo.checksums" -}}
checksum/config: {{ include (print .Template.BasePath "/configmap.yaml") . | sha256sum }}
checksum/secret: {{ toJson (list .Values.auth .Values.tls) | sha256sum }}
{{- end -}}

{{/* Pod-level settings every kolo pod shares. */}}
{{- define "kolo.podCommon" -}}
serviceAccountName: {{ include "kolo.serviceAccountName" . }}
automountServiceAccountToken: {{ .Values.serviceAccount.automountToken }}
{{- with .Values.imagePullSecrets }}
imagePullSecrets:
  {{- toYaml . | nindent 2 }}
{{- end }}
securityContext:
  {{- toYaml .Values.podSecurityContext | nindent 2 }}
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
Secret volumes (token, TLS) and /tmp for every kolo pod: call with (dict "ctx" $ "withKey" true)
for the coordinators (certificate and key); the others get only the CA clients trust.
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
- name: tmp
  emptyDir: {}
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
