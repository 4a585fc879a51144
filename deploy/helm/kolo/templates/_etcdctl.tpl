{{/*
What the chart's own jobs (the etcd auth setup, the snapshot backup) need to run etcdctl
against the chart's etcd: environment, volumes and mounts. etcdctl reads ETCDCTL_* from the
environment; the root password is read from its file by the scripts, never put in an
argument. Jobs run kolo's image, which carries etcdctl and a shell.
*/}}

{{- define "kolo.etcdctlEnv" -}}
- name: ETCDCTL_API
  value: "3"
- name: ETCDCTL_ENDPOINTS
  value: {{ include "kolo.etcdEndpoints" . | quote }}
- name: ETCDCTL_COMMAND_TIMEOUT
  value: 30s
{{- if .Values.etcd.tls.enabled }}
- name: ETCDCTL_CACERT
  value: /etc/kolo/etcd-tls/ca.crt
- name: ETCDCTL_CERT
  value: /etc/kolo/etcd-tls/tls.crt
- name: ETCDCTL_KEY
  value: /etc/kolo/etcd-tls/tls.key
{{- end }}
{{- if .Values.etcd.auth.enabled }}
- name: ETCD_ROOT_PASSWORD_FILE
  value: /etc/kolo/etcd-root/root-password
{{- end }}
{{- end -}}

{{- define "kolo.etcdctlVolumes" -}}
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
- name: etcd-root
  secret:
    secretName: {{ include "kolo.etcdAuthSecretName" . }}
    defaultMode: 288
{{- end }}
- name: tmp
  emptyDir: {}
{{- end -}}

{{- define "kolo.etcdctlVolumeMounts" -}}
{{- if .Values.etcd.tls.enabled }}
- name: etcd-tls
  mountPath: /etc/kolo/etcd-tls
  readOnly: true
{{- end }}
{{- if .Values.etcd.auth.enabled }}
- name: etcd-root
  mountPath: /etc/kolo/etcd-root
  readOnly: true
{{- end }}
- name: tmp
  mountPath: /tmp
{{- end -}}
