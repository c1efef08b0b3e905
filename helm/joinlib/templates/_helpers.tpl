{{/* Chart name, truncated for use in object names. */}}
{{- define "joinlib.name" -}}
{{- default .Chart.Name .Values.nameOverride | trunc 36 | trimSuffix "-" -}}
{{- end -}}

{{/*
Fully qualified app name, at most 36 characters, so that "<fullname>-node-<site>" (site names
are at most 21 characters, see values.schema.json) fits a 63-character DNS label.
*/}}
{{- define "joinlib.fullname" -}}
{{- if .Values.fullnameOverride -}}
{{- .Values.fullnameOverride | trunc 36 | trimSuffix "-" -}}
{{- else -}}
{{- $name := default .Chart.Name .Values.nameOverride -}}
{{- if contains $name .Release.Name -}}
{{- .Release.Name | trunc 36 | trimSuffix "-" -}}
{{- else -}}
{{- printf "%s-%s" .Release.Name $name | trunc 36 | trimSuffix "-" -}}
{{- end -}}
{{- end -}}
{{- end -}}

{{- define "joinlib.chart" -}}
{{- printf "%s-%s" .Chart.Name .Chart.Version | replace "+" "_" | trunc 63 | trimSuffix "-" -}}
{{- end -}}

{{/* Selector labels of one component: (dict "ctx" $ "component" "node" ["site" "r1"]) */}}
{{- define "joinlib.selectorLabels" -}}
app.kubernetes.io/name: {{ include "joinlib.name" .ctx }}
app.kubernetes.io/instance: {{ .ctx.Release.Name }}
app.kubernetes.io/component: {{ .component }}
{{- with .site }}
joinlib.io/site: {{ . | quote }}
{{- end }}
{{- end -}}

{{/* All labels of one component's objects. */}}
{{- define "joinlib.labels" -}}
helm.sh/chart: {{ include "joinlib.chart" .ctx }}
{{ include "joinlib.selectorLabels" . }}
app.kubernetes.io/version: {{ .ctx.Chart.AppVersion | quote }}
app.kubernetes.io/managed-by: {{ .ctx.Release.Service }}
app.kubernetes.io/part-of: joinlib
{{- end -}}

{{/* Labels of a metrics Service: the ServiceMonitor selects on them; joinlib.io/job becomes the
Prometheus job label (same job names as monitoring/prometheus/prometheus.yml). */}}
{{- define "joinlib.metricsServiceLabels" -}}
{{ include "joinlib.labels" . }}
joinlib.io/metrics: "true"
joinlib.io/job: joinlib-{{ .component }}
{{- end -}}

{{- define "joinlib.image" -}}
{{- printf "%s:%s" .Values.image.repository (default .Chart.AppVersion .Values.image.tag) -}}
{{- end -}}

{{- define "joinlib.sparkImage" -}}
{{- printf "%s:%s" .Values.spark.image.repository (default .Chart.AppVersion .Values.spark.image.tag) -}}
{{- end -}}

{{/* Path of the query file inside the containers. */}}
{{- define "joinlib.queryPath" -}}
{{- if .Values.query.inline -}}
/etc/joinlib/query.yaml
{{- else -}}
{{- .Values.query.file -}}
{{- end -}}
{{- end -}}

{{/* Sites as a list of objects {name: ..., ...overrides}; fails on duplicate names. */}}
{{- define "joinlib.sites" -}}
{{- $out := list -}}
{{- $seen := dict -}}
{{- range .Values.sites -}}
{{- $site := kindIs "string" . | ternary (dict "name" .) . -}}
{{- if hasKey $seen $site.name -}}
{{- fail (printf "sites: site %q is listed twice" $site.name) -}}
{{- end -}}
{{- $_ := set $seen $site.name true -}}
{{- $out = append $out $site -}}
{{- end -}}
{{- toJson (dict "sites" $out) -}}
{{- end -}}

{{/* Pod annotations: config checksum (rolls pods when the env ConfigMap changes) + scrape hints. */}}
{{- define "joinlib.podAnnotations" -}}
checksum/config: {{ include (print .ctx.Template.BasePath "/configmap.yaml") .ctx | sha256sum }}
{{- if .ctx.Values.metrics.podAnnotations }}
prometheus.io/scrape: "true"
prometheus.io/port: {{ .ctx.Values.metrics.port | quote }}
prometheus.io/path: /metrics
{{- end }}
{{- with .extra }}
{{ toYaml . }}
{{- end }}
{{- end -}}

{{/* Env shared by every container: ConfigMap + secret-backed REDIS_URL + extraEnv lists. */}}
{{- define "joinlib.env" -}}
envFrom:
  - configMapRef:
      name: {{ include "joinlib.fullname" .ctx }}-env
{{- $env := concat (.ctx.Values.extraEnv | default list) (.extra | default list) }}
{{- $sec := include "joinlib.securityEnv" . | fromYamlArray }}
{{- if or .redis $env $sec }}
env:
{{- if and .redis .ctx.Values.redis.urlSecret.name }}
  - name: REDIS_URL
    valueFrom:
      secretKeyRef:
        name: {{ .ctx.Values.redis.urlSecret.name }}
        key: {{ .ctx.Values.redis.urlSecret.key }}
{{- else if .redis }}
  - name: REDIS_URL
    value: {{ .ctx.Values.redis.url | quote }}
{{- end }}
{{- with $sec }}
{{ toYaml . | indent 2 }}
{{- end }}
{{- with $env }}
{{ toYaml . | indent 2 }}
{{- end }}
{{- end }}
{{- end -}}

{{/* ---------------------------------------------------------------- security (docs/security.md)
Credentials are files from one Secret mounted at /etc/joinlib/secrets; the env only names them.
Every helper takes (dict "ctx" $ "component" "node"|"planner"|"source"|"spark"|"admin" ["redis" true]);
"admin" is the ACL job's (security.acls). */}}

{{- define "joinlib.credentialsSecret" -}}
{{- .Values.security.existingSecret | default (printf "%s-credentials" (include "joinlib.fullname" .)) -}}
{{- end -}}

{{/* The Secret keys a component's pod mounts, as a list of {key, path}. */}}
{{- define "joinlib.secretItems" -}}
{{- $s := .ctx.Values.security -}}
{{- $items := list -}}
{{- if hasPrefix "SASL_" $s.kafka.protocol -}}
{{- $items = append $items (dict "key" (printf "kafka-%s-password" .component) "path" "kafka-password") -}}
{{- end -}}
{{- if and (ne $s.kafka.protocol "PLAINTEXT") $s.kafka.caFromSecret -}}
{{- $items = append $items (dict "key" "kafka-ca.crt" "path" "kafka-ca.crt") -}}
{{- end -}}
{{- if and (ne $s.kafka.protocol "PLAINTEXT") $s.kafka.clientCertFromSecret -}}
{{- $items = append $items (dict "key" (printf "kafka-%s.crt" .component) "path" "kafka-client.crt") -}}
{{- $items = append $items (dict "key" (printf "kafka-%s.key" .component) "path" "kafka-client.key") -}}
{{- end -}}
{{- if and .redis $s.redis.user -}}
{{- $items = append $items (dict "key" "redis-node-password" "path" "redis-password") -}}
{{- end -}}
{{- if and .redis $s.redis.caFromSecret -}}
{{- $items = append $items (dict "key" "redis-ca.crt" "path" "redis-ca.crt") -}}
{{- end -}}
{{- if and (eq .component "planner") $s.planner.tokenFromSecret -}}
{{- $items = append $items (dict "key" "planner-token" "path" "planner-token") -}}
{{- end -}}
{{- if and $items (not $s.existingSecret) -}}
{{- if not $s.credentials -}}
{{- fail (printf "security: the %s needs Secret keys %s: set security.existingSecret (recommended) or security.credentials" .component (include "joinlib.itemKeys" $items)) -}}
{{- end -}}
{{- range $items -}}
{{- if not (hasKey $s.credentials .key) -}}
{{- fail (printf "security.credentials: key %q is missing" .key) -}}
{{- end -}}
{{- end -}}
{{- end -}}
{{- toYaml $items -}}
{{- end -}}

{{- define "joinlib.itemKeys" -}}
{{- $keys := list -}}
{{- range . }}{{ $keys = append $keys .key }}{{ end -}}
{{- join ", " $keys -}}
{{- end -}}

{{/* Env of a component: protocol, users and the paths of the mounted secrets (never a secret). */}}
{{- define "joinlib.securityEnv" -}}
{{- $s := .ctx.Values.security -}}
{{- $k := $s.kafka -}}
{{- $dir := "/etc/joinlib/secrets" -}}
{{- $out := list -}}
{{- if ne $k.protocol "PLAINTEXT" -}}
{{- $out = append $out (dict "name" "KAFKA_SECURITY_PROTOCOL" "value" $k.protocol) -}}
{{- if hasPrefix "SASL_" $k.protocol -}}
{{- $out = append $out (dict "name" "KAFKA_SASL_MECHANISM" "value" $k.mechanism) -}}
{{- $out = append $out (dict "name" "KAFKA_SASL_USERNAME" "value" (index $k.users .component)) -}}
{{- $out = append $out (dict "name" "KAFKA_SASL_PASSWORD_FILE" "value" (printf "%s/kafka-password" $dir)) -}}
{{- end -}}
{{- if $k.caFromSecret -}}
{{- $out = append $out (dict "name" "KAFKA_SSL_CA_FILE" "value" (printf "%s/kafka-ca.crt" $dir)) -}}
{{- end -}}
{{- if $k.clientCertFromSecret -}}
{{- $out = append $out (dict "name" "KAFKA_SSL_CERT_FILE" "value" (printf "%s/kafka-client.crt" $dir)) -}}
{{- $out = append $out (dict "name" "KAFKA_SSL_KEY_FILE" "value" (printf "%s/kafka-client.key" $dir)) -}}
{{- end -}}
{{- if not $k.verifyHostname -}}
{{- $out = append $out (dict "name" "KAFKA_SSL_VERIFY_HOSTNAME" "value" "false") -}}
{{- end -}}
{{- end -}}
{{- if and .redis $s.redis.user -}}
{{- $out = append $out (dict "name" "REDIS_USERNAME" "value" $s.redis.user) -}}
{{- $out = append $out (dict "name" "REDIS_PASSWORD_FILE" "value" (printf "%s/redis-password" $dir)) -}}
{{- end -}}
{{- if and .redis $s.redis.caFromSecret -}}
{{- $out = append $out (dict "name" "REDIS_SSL_CA_FILE" "value" (printf "%s/redis-ca.crt" $dir)) -}}
{{- end -}}
{{- if and (eq .component "planner") $s.planner.tokenFromSecret -}}
{{- $out = append $out (dict "name" "JOINLIB_PLANNER_TOKEN_FILE" "value" (printf "%s/planner-token" $dir)) -}}
{{- end -}}
{{- toYaml $out -}}
{{- end -}}

{{/* volumeMounts / volumes entries of the credentials (nothing when the component needs none). */}}
{{- define "joinlib.secretVolumeMounts" -}}
{{- if include "joinlib.secretItems" . | fromYamlArray -}}
- name: credentials
  mountPath: /etc/joinlib/secrets
  readOnly: true
{{- end }}
{{- end -}}

{{- define "joinlib.secretVolumes" -}}
{{- $items := include "joinlib.secretItems" . | fromYamlArray -}}
{{- if $items -}}
- name: credentials
  secret:
    secretName: {{ include "joinlib.credentialsSecret" .ctx }}
    defaultMode: 0440
    items:
{{ toYaml $items | indent 6 }}
{{- end }}
{{- end -}}

{{/* Probe on the metrics port; (dict "ctx" $ "kind" "liveness"|"readiness" ["path" "/healthz"]
["port" "http"] ["override" (dict "initialDelaySeconds" 120)]); timing from .Values.probes. */}}
{{- define "joinlib.probe" -}}
httpGet:
  path: {{ .path | default "/metrics" }}
  port: {{ .port | default "metrics" }}
{{ toYaml (merge (.override | default dict) (deepCopy (index .ctx.Values.probes .kind))) }}
{{- end -}}

{{/* Volume mounts for /tmp (read-only root filesystem) and the inline query. */}}
{{- define "joinlib.commonVolumeMounts" -}}
- name: tmp
  mountPath: /tmp
{{- if .Values.query.inline }}
- name: query
  mountPath: /etc/joinlib
  readOnly: true
{{- end }}
{{- end -}}

{{- define "joinlib.commonVolumes" -}}
- name: tmp
  emptyDir: {}
{{- if .Values.query.inline }}
- name: query
  configMap:
    name: {{ include "joinlib.fullname" . }}-query
{{- end }}
{{- end -}}

{{/* Pod-level settings shared by all pods; (dict "ctx" $ "spec" <component values>) */}}
{{- define "joinlib.podSpecCommon" -}}
securityContext:
{{ toYaml .ctx.Values.podSecurityContext | indent 2 }}
{{- with .ctx.Values.imagePullSecrets }}
imagePullSecrets:
{{ toYaml . | indent 2 }}
{{- end }}
{{- with .spec.nodeSelector }}
nodeSelector:
{{ toYaml . | indent 2 }}
{{- end }}
{{- with .spec.tolerations }}
tolerations:
{{ toYaml . | indent 2 }}
{{- end }}
{{- with .spec.affinity }}
affinity:
{{ toYaml . | indent 2 }}
{{- end }}
{{- end -}}
