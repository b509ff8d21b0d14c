{{/* The name prefix of every object: fullnameOverride, else the release's name, followed by
"-ckf" unless the release's name already says ckf (release "ckf" gives ckf-relay-dc01, not
ckf-ckf-relay-dc01). */}}
{{- define "ckf.fullname" -}}
{{- if .Values.fullnameOverride -}}
{{- .Values.fullnameOverride | trimSuffix "-" -}}
{{- else if contains "ckf" .Release.Name -}}
{{- .Release.Name | trimSuffix "-" -}}
{{- else -}}
{{- printf "%s-ckf" .Release.Name -}}
{{- end -}}
{{- end -}}

{{/* An object's name: the prefix and the given parts, joined by "-". Refused past 63
characters (a Service's name is a DNS label) rather than cut, since two cut names can meet.
Call with (list $ "part" ...). */}}
{{- define "ckf.name" -}}
{{- $root := first . -}}
{{- $name := join "-" (prepend (rest .) (include "ckf.fullname" $root)) -}}
{{- if gt (len $name) 63 -}}
{{- fail (printf "the object name %q is longer than 63 characters: set fullnameOverride (or install under a shorter release name)" $name) -}}
{{- end -}}
{{- $name -}}
{{- end -}}

{{/* A number of the values as its digits: Helm reads the values' numbers as floating point,
which toString writes as 1e+06. Anything else as toString writes it. */}}
{{- define "ckf.wholeNumber" -}}
{{- if and (kindIs "float64" .) (eq (float64 (int64 .)) .) -}}
{{- printf "%d" (int64 .) -}}
{{- else -}}
{{- toString . -}}
{{- end -}}
{{- end -}}

{{/* A DC id as lower-case hex without leading zeros (0xdc01 and 56321 both give dc01): the
form object names, the label ckf-stream/dc and the default KV topic use, and what two DC ids
are compared by. Ids are given as indexer.lanes takes them: 0x and hex digits, or decimal. */}}
{{- define "ckf.dcHex" -}}
{{- $s := lower (include "ckf.wholeNumber" .) -}}
{{- if regexMatch "^0x[0-9a-f]{1,16}$" $s -}}
{{- default "0" (regexReplaceAll "^0+" (trimPrefix "0x" $s) "") -}}
{{- else if regexMatch "^[0-9]{1,18}$" $s -}}
{{- printf "%x" (int64 $s) -}}
{{- else -}}
{{- fail (printf "dcs: the DC id %q is not 0x and 1 to 16 hex digits (nor a decimal number of up to 18 digits)" (toString .)) -}}
{{- end -}}
{{- end -}}

{{/* A DC's KV-events topic: its kvTopic, else kv-events.dc-<DC id in hex>, the topic loadgen
and demo write for the DC. Call with the DC's entry. */}}
{{- define "ckf.kvTopic" -}}
{{- default (printf "kv-events.dc-%s" (include "ckf.dcHex" .id)) .kvTopic -}}
{{- end -}}

{{/* The checks of values that no process could run with, made at render time so that
helm install refuses them with the value named instead of leaving pods in a crash loop:
indexer.domain's form, DC ids, lanes (each in [0,63], consumer §16, one DC per lane),
one KV topic per DC, the bridge's engines (worker ids unique in a DC), and the region
(ckf.validateRegion). */}}
{{- define "ckf.validate" -}}
{{- $domain := required "domain is required: the indexer domain every relay and indexer shares (indexer.domain), <32 hex digits>:<32 hex digits>; see the chart's README" .Values.domain -}}
{{- if not (regexMatch "^[0-9a-fA-F]{32}:[0-9a-fA-F]{32}$" $domain) -}}
{{- fail (printf "domain %q is not <32 hex digits>:<32 hex digits> (indexer.domain)" $domain) -}}
{{- end -}}
{{- if not .Values.dcs -}}
{{- fail "dcs lists no DC: give each DC pool's id and lane" -}}
{{- end -}}
{{- $laneOf := dict -}}
{{- $dcOfLane := dict -}}
{{- $dcOfTopic := dict -}}
{{- range $i, $dc := .Values.dcs -}}
{{- if not (and (kindIs "map" $dc) (hasKey $dc "id") (hasKey $dc "lane")) -}}
{{- fail (printf "dcs[%d] has no id or no lane (helm's --set dcs[N].key=... replaces the whole list: give dcs in a values file)" $i) -}}
{{- end -}}
{{- $hex := include "ckf.dcHex" $dc.id -}}
{{- $lane := include "ckf.wholeNumber" $dc.lane -}}
{{- if not (regexMatch "^[0-9]+$" $lane) -}}
{{- fail (printf "dcs[%d] (DC 0x%s): lane %q is not a number in [0,63]" $i $hex $lane) -}}
{{- end -}}
{{- if ge (int $lane) 64 -}}
{{- fail (printf "dcs[%d] (DC 0x%s): lane %s is not in [0,63] (consumer §16: up to 64 lanes)" $i $hex $lane) -}}
{{- end -}}
{{- if hasKey $laneOf $hex -}}
{{- fail (printf "dcs[%d]: DC 0x%s is listed twice (lanes %s and %s); a DC publishes on one lane" $i $hex (get $laneOf $hex) $lane) -}}
{{- end -}}
{{- if hasKey $dcOfLane $lane -}}
{{- fail (printf "dcs[%d]: lane %s is given to DC 0x%s and DC 0x%s; each lane carries one DC" $i $lane (get $dcOfLane $lane) $hex) -}}
{{- end -}}
{{- $topic := include "ckf.kvTopic" $dc -}}
{{- if hasKey $dcOfTopic $topic -}}
{{- fail (printf "dcs[%d]: DC 0x%s and DC 0x%s both read the KV topic %q; each DC's engines write a topic of their own (kvTopic)" $i (get $dcOfTopic $topic) $hex $topic) -}}
{{- end -}}
{{- $_ := set $laneOf $hex $lane -}}
{{- $_ := set $dcOfLane $lane $hex -}}
{{- $_ := set $dcOfTopic $topic $hex -}}
{{- with $dc.bridge -}}
{{- $workers := dict -}}
{{- range $j, $e := .engines -}}
{{- $w := include "ckf.wholeNumber" (required (printf "dcs[%d].bridge.engines[%d] (DC 0x%s) has no worker_id" $i $j $hex) $e.worker_id) -}}
{{- if or (kindIs "string" $e.worker_id) (not (regexMatch "^[0-9]{1,15}$" $w)) -}}
{{- fail (printf "dcs[%d].bridge.engines[%d] (DC 0x%s): worker_id %v is not an unquoted whole number of up to 15 digits (Helm holds values' numbers as floating point: larger ones lose digits)" $i $j $hex $e.worker_id) -}}
{{- end -}}
{{- $_ := required (printf "dcs[%d].bridge.engines[%d] (DC 0x%s) has no endpoint" $i $j $hex) $e.endpoint -}}
{{- if hasKey $workers $w -}}
{{- fail (printf "dcs[%d].bridge.engines (DC 0x%s): worker_id %s is listed twice (engines %s and %d); worker ids are unique among a DC's engines" $i $hex $w (get $workers $w) $j) -}}
{{- end -}}
{{- $_ := set $workers $w (toString $j) -}}
{{- end -}}
{{- end -}}
{{- end -}}
{{- include "ckf.validateRegion" (list . $laneOf $dcOfLane) -}}
{{- end -}}

{{/* The region's values (design §8; docs/regions.md): its MirrorMaker alias and the other
regions' (region.alias, region.peers: MirrorMaker's cluster aliases, a-z A-Z 0-9 _ -, as
indexer.remote_lanes takes them), the mirror policy, and the DCs of other regions whose lanes
this region's indexers read from MirrorMaker's copies (region.remoteDCs: id, lane, region).
Refused: a remote DC without its region or of a region not in region.peers, a lane or DC both
local (dcs) and remote or remote twice, peers without this region's alias, this region among
its peers. Call with (list $ laneOf dcOfLane): the local DCs' lanes, from ckf.validate. */}}
{{- define "ckf.validateRegion" -}}
{{- $root := index . 0 -}}
{{- $laneOf := index . 1 -}}
{{- $dcOfLane := index . 2 -}}
{{- $r := $root.Values.region | default dict -}}
{{- $alias := $r.alias | default "" | toString -}}
{{- $peers := $r.peers | default list -}}
{{- $remote := $r.remoteDCs | default list -}}
{{- $aliasRule := "^[a-zA-Z0-9_-]+$" -}}
{{- if not (has ($r.mirrorPolicy | default "default") (list "default" "identity")) -}}
{{- fail (printf "region.mirrorPolicy %q is not default or identity (indexer.mirror_policy)" $r.mirrorPolicy) -}}
{{- end -}}
{{- if and (or $peers $remote) (not $alias) -}}
{{- fail "region.alias is required with region.peers or region.remoteDCs: this region's MirrorMaker alias" -}}
{{- end -}}
{{- if and $alias (not (regexMatch $aliasRule $alias)) -}}
{{- fail (printf "region.alias %q is not a region alias: a-z A-Z 0-9 _ - (MirrorMaker's cluster alias, which a dot would split)" $alias) -}}
{{- end -}}
{{- $seen := dict -}}
{{- range $i, $p := $peers -}}
{{- $p = toString $p -}}
{{- if not (regexMatch $aliasRule $p) -}}
{{- fail (printf "region.peers[%d] %q is not a region alias: a-z A-Z 0-9 _ - (MirrorMaker's cluster alias, which a dot would split)" $i $p) -}}
{{- end -}}
{{- if eq $p $alias -}}
{{- fail (printf "region.peers[%d] is %q, this region's own alias: peers are the other regions" $i $p) -}}
{{- end -}}
{{- if hasKey $seen $p -}}
{{- fail (printf "region.peers: %q is listed twice" $p) -}}
{{- end -}}
{{- $_ := set $seen $p "" -}}
{{- end -}}
{{- range $i, $dc := $remote -}}
{{- if not (and (kindIs "map" $dc) (hasKey $dc "id") (hasKey $dc "lane") (hasKey $dc "region")) -}}
{{- fail (printf "region.remoteDCs[%d] has no id, lane or region" $i) -}}
{{- end -}}
{{- $hex := include "ckf.dcHex" $dc.id -}}
{{- $lane := include "ckf.wholeNumber" $dc.lane -}}
{{- $from := toString $dc.region -}}
{{- if not (regexMatch "^[0-9]+$" $lane) -}}
{{- fail (printf "region.remoteDCs[%d] (DC 0x%s): lane %q is not a number in [0,63]" $i $hex $lane) -}}
{{- end -}}
{{- if ge (int $lane) 64 -}}
{{- fail (printf "region.remoteDCs[%d] (DC 0x%s): lane %s is not in [0,63] (consumer §16: up to 64 lanes)" $i $hex $lane) -}}
{{- end -}}
{{- if not (hasKey $seen $from) -}}
{{- fail (printf "region.remoteDCs[%d] (DC 0x%s): region %q is unknown: not in region.peers %v (the other regions' MirrorMaker aliases)" $i $hex $from $peers) -}}
{{- end -}}
{{- if hasKey $laneOf $hex -}}
{{- fail (printf "region.remoteDCs[%d]: DC 0x%s is listed twice (lanes %s and %s): a DC runs in one region, on one lane" $i $hex (get $laneOf $hex) $lane) -}}
{{- end -}}
{{- if hasKey $dcOfLane $lane -}}
{{- fail (printf "region.remoteDCs[%d]: lane %s is given to DC 0x%s and DC 0x%s of region %s; a lane is local (dcs) or remote, and carries one DC" $i $lane (get $dcOfLane $lane) $hex $from) -}}
{{- end -}}
{{- $_ := set $laneOf $hex $lane -}}
{{- $_ := set $dcOfLane $lane $hex -}}
{{- end -}}
{{- end -}}

{{/* indexer.remote_lanes from region.remoteDCs: lane=alias pairs. */}}
{{- define "ckf.remoteLanes" -}}
{{- $pairs := list -}}
{{- range (.Values.region | default dict).remoteDCs -}}
{{- $pairs = append $pairs (printf "%s=%s" (include "ckf.wholeNumber" .lane) (toString .region)) -}}
{{- end -}}
{{- join "," $pairs -}}
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

{{/* indexer.lanes from the DC list and the other regions' DCs (region.remoteDCs): lane=dc
pairs; every relay and indexer of the region shares the lane map of every region. */}}
{{- define "ckf.lanes" -}}
{{- $pairs := list -}}
{{- range concat .Values.dcs ((.Values.region | default dict).remoteDCs | default list) -}}
{{- $pairs = append $pairs (printf "%v=0x%s" .lane (include "ckf.dcHex" .id)) -}}
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
