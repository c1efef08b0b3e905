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
{{- if or .redis $env }}
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
{{- with $env }}
{{ toYaml . | indent 2 }}
{{- end }}
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
