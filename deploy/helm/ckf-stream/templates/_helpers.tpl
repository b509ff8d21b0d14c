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
{{- with .Values.kafka.tls }}
{{- if .enabled }}
- name: CKF_KAFKA_TLS_ENABLED
  value: "true"
{{- if .secretName }}
- name: CKF_KAFKA_TLS_CA_FILE
  value: /etc/ckf/kafka-tls/ca.crt
{{- end }}
{{- if .clientCertificate }}
- name: CKF_KAFKA_TLS_CERT_FILE
  value: /etc/ckf/kafka-tls/tls.crt
- name: CKF_KAFKA_TLS_KEY_FILE
  value: /etc/ckf/kafka-tls/tls.key
{{- end }}
{{- end }}
{{- end }}
{{- with .Values.kafka.sasl }}
{{- if .mechanism }}
- name: CKF_KAFKA_SASL_MECHANISM
  value: {{ .mechanism | quote }}
- name: CKF_KAFKA_SASL_USERNAME
  value: {{ required "kafka.sasl.username is required with kafka.sasl.mechanism" .username | quote }}
- name: CKF_KAFKA_SASL_PASSWORD
  valueFrom:
    secretKeyRef:
      name: {{ required "kafka.sasl.passwordSecret.name is required with kafka.sasl.mechanism" .passwordSecret.name | quote }}
      key: {{ .passwordSecret.key | quote }}
{{- end }}
{{- end }}
{{- with .Values.http.tls }}
{{- if .secretName }}
- name: CKF_HTTP_TLS_CERT_FILE
  value: /etc/ckf/http-tls/tls.crt
- name: CKF_HTTP_TLS_KEY_FILE
  value: /etc/ckf/http-tls/tls.key
{{- if .requireClientCertificates }}
- name: CKF_HTTP_TLS_CLIENT_CA_FILE
  value: /etc/ckf/http-tls/ca.crt
{{- end }}
{{- else if .requireClientCertificates }}
{{- fail "http.tls.requireClientCertificates needs http.tls.secretName" }}
{{- end }}
{{- end }}
{{- if .Values.http.auth.tokenSecret.name }}
- name: CKF_HTTP_AUTH_BEARER_TOKEN_FILE
  value: /etc/ckf/http-token/token
{{- end }}
{{- range $k, $v := .Values.env }}
- name: {{ $k }}
  value: {{ $v | quote }}
{{- end }}
{{- end -}}

{{/* Probes and port of every container: /healthz answers from process start (liveness),
/readyz once the process serves (readiness). */}}
{{- define "ckf.probes" -}}
{{- $scheme := ternary "HTTPS" "HTTP" (ne .Values.http.tls.secretName "") -}}
ports:
  - name: http
    containerPort: 8080
    protocol: TCP
livenessProbe:
  httpGet: {path: /healthz, port: http, scheme: {{ $scheme }}}
  periodSeconds: 10
  failureThreshold: 3
readinessProbe:
  httpGet: {path: /readyz, port: http, scheme: {{ $scheme }}}
  periodSeconds: 2
  failureThreshold: 2
{{- end -}}

{{/* The Secrets the access settings read, mounted read-only where ckf.env points. The token is
mounted as a file so that it appears in no variable and no config dump. */}}
{{- define "ckf.volumeMounts" -}}
{{- if and .Values.kafka.tls.enabled .Values.kafka.tls.secretName }}
- {name: kafka-tls, mountPath: /etc/ckf/kafka-tls, readOnly: true}
{{- end }}
{{- if .Values.http.tls.secretName }}
- {name: http-tls, mountPath: /etc/ckf/http-tls, readOnly: true}
{{- end }}
{{- if .Values.http.auth.tokenSecret.name }}
- {name: http-token, mountPath: /etc/ckf/http-token, readOnly: true}
{{- end }}
{{- end -}}

{{- define "ckf.volumes" -}}
{{- if and .Values.kafka.tls.enabled .Values.kafka.tls.secretName }}
- name: kafka-tls
  secret: {secretName: {{ .Values.kafka.tls.secretName | quote }}}
{{- end }}
{{- if .Values.http.tls.secretName }}
- name: http-tls
  secret: {secretName: {{ .Values.http.tls.secretName | quote }}}
{{- end }}
{{- with .Values.http.auth.tokenSecret }}
{{- if .name }}
- name: http-token
  secret:
    secretName: {{ .name | quote }}
    items: [{key: {{ .key | quote }}, path: token}]
{{- end }}
{{- end }}
{{- end -}}
