{{/*
examples/helm_test.go renders this chart and runs helm lint --strict on it
with Helm's own code, and compares what it renders with
examples/kubernetes.
*/}}

{{/* The chart's name, for the app.kubernetes.io/name label. */}}
{{- define "floodgate.name" -}}
{{- default .Chart.Name .Values.nameOverride | trunc 63 | trimSuffix "-" -}}
{{- end -}}

{{/* The objects' name: the release's when it already says floodgate. */}}
{{- define "floodgate.fullname" -}}
{{- if .Values.fullnameOverride -}}
{{- .Values.fullnameOverride | trunc 63 | trimSuffix "-" -}}
{{- else -}}
{{- $name := default .Chart.Name .Values.nameOverride -}}
{{- if contains $name .Release.Name -}}
{{- .Release.Name | trunc 63 | trimSuffix "-" -}}
{{- else -}}
{{- printf "%s-%s" .Release.Name $name | trunc 63 | trimSuffix "-" -}}
{{- end -}}
{{- end -}}
{{- end -}}

{{/* Selects the floodgate pods of this release. */}}
{{- define "floodgate.selectorLabels" -}}
app.kubernetes.io/name: {{ include "floodgate.name" . }}
app.kubernetes.io/instance: {{ .Release.Name }}
{{- end -}}

{{- define "floodgate.labels" -}}
{{ include "floodgate.selectorLabels" . }}
app.kubernetes.io/version: {{ .Chart.AppVersion | quote }}
app.kubernetes.io/managed-by: {{ .Release.Service }}
{{- end -}}

{{/* Selects the Redis pods of this release. */}}
{{- define "floodgate.redisSelectorLabels" -}}
app.kubernetes.io/name: redis
app.kubernetes.io/instance: {{ .Release.Name }}
{{- end -}}

{{- define "floodgate.redisLabels" -}}
{{ include "floodgate.redisSelectorLabels" . }}
app.kubernetes.io/part-of: {{ include "floodgate.name" . }}
app.kubernetes.io/managed-by: {{ .Release.Service }}
{{- end -}}

{{- define "floodgate.redisName" -}}
{{- printf "%s-redis" (include "floodgate.fullname" .) | trunc 63 | trimSuffix "-" -}}
{{- end -}}

{{/* The Redis floodgate keeps its counters in: the chart's, or redis.address. */}}
{{- define "floodgate.redisAddress" -}}
{{- if .Values.redis.enabled -}}
{{- printf "%s:6379" (include "floodgate.redisName" .) -}}
{{- else -}}
{{- required "redis.address is required when redis.enabled is false (host:port or redis://..., as -redis takes)" .Values.redis.address -}}
{{- end -}}
{{- end -}}
