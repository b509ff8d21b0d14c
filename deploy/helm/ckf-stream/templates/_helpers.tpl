{{/* The release's name prefix of every object. */}}
{{- define "ckf.fullname" -}}
{{- printf "%s-ckf" .Release.Name | trunc 50 | trimSuffix "-" -}}
{{- end -}}

{{/* Labels of every object; "component" is added per workload. */}}
{{- define "ckf.labels" -}}
app.kubernetes.io/name: ckf-stream
app.kubernetes.io/instance: {{ .Release.Name }}
app.kubernetes.io/version: {{ .Chart.AppVersion | quote }}
app.kubernetes.io/managed-by: {{ .Release.Service }}
{{- end -}}

{{- define "ckf.image" -}}
{{ .Values.image.repository }}:{{ .Values.image.tag | default .Chart.AppVersion }}
{{- end -}}

{{/* indexer.lanes from the DC list: lane=dc pairs. */}}
{{- define "ckf.lanes" -}}
{{- $pairs := list -}}
{{- range .Values.dcs -}}
{{- $pairs = append $pairs (printf "%v=%v" .lane .id) -}}
{{- end -}}
{{- join "," $pairs -}}
{{- end -}}

{{/* The variables every process gets. The HTTP server listens on every interface of the pod
(the image's default, 127.0.0.1, would hide the probes and metrics). */}}
{{- define "ckf.env" -}}
- name: KAFKA_BROKERS
  value: {{ .Values.kafka.brokers | quote }}
- name: CKF_INDEXER_DOMAIN
  value: {{ .Values.domain | quote }}
- name: CKF_INDEXER_LANES
  value: {{ include "ckf.lanes" . | quote }}
- name: CKF_HTTP_LISTEN
  value: "0.0.0.0:8080"
{{- range $k, $v := .Values.env }}
- name: {{ $k }}
  value: {{ $v | quote }}
{{- end }}
{{- end -}}

{{/* Probes and port of every container: /healthz answers from process start (liveness),
/readyz once the process serves (readiness). */}}
{{- define "ckf.probes" -}}
ports:
  - name: http
    containerPort: 8080
    protocol: TCP
livenessProbe:
  httpGet: {path: /healthz, port: http}
  periodSeconds: 10
  failureThreshold: 3
readinessProbe:
  httpGet: {path: /readyz, port: http}
  periodSeconds: 2
  failureThreshold: 2
{{- end -}}
