{{/* Chart name, truncated to the 63 characters Kubernetes allows. */}}
{{- define "wowd.name" -}}
{{- default .Chart.Name .Values.nameOverride | trunc 63 | trimSuffix "-" }}
{{- end }}

{{/* Full name: release and chart, unless the release name has the chart's. */}}
{{- define "wowd.fullname" -}}
{{- if .Values.fullnameOverride }}
{{- .Values.fullnameOverride | trunc 63 | trimSuffix "-" }}
{{- else }}
{{- $name := default .Chart.Name .Values.nameOverride }}
{{- if contains $name .Release.Name }}
{{- .Release.Name | trunc 63 | trimSuffix "-" }}
{{- else }}
{{- printf "%s-%s" .Release.Name $name | trunc 63 | trimSuffix "-" }}
{{- end }}
{{- end }}
{{- end }}

{{- define "wowd.chart" -}}
{{- printf "%s-%s" .Chart.Name .Chart.Version | replace "+" "_" | trunc 63 | trimSuffix "-" }}
{{- end }}

{{- define "wowd.selectorLabels" -}}
app.kubernetes.io/name: {{ include "wowd.name" . }}
app.kubernetes.io/instance: {{ .Release.Name }}
{{- end }}

{{- define "wowd.labels" -}}
helm.sh/chart: {{ include "wowd.chart" . }}
{{ include "wowd.selectorLabels" . }}
app.kubernetes.io/version: {{ .Values.image.tag | default .Chart.AppVersion | quote }}
app.kubernetes.io/managed-by: {{ .Release.Service }}
{{- end }}

{{- define "wowd.serviceAccountName" -}}
{{- if .Values.serviceAccount.create }}
{{- default (include "wowd.fullname" .) .Values.serviceAccount.name }}
{{- else }}
{{- default "default" .Values.serviceAccount.name }}
{{- end }}
{{- end }}

{{/* The configuration file: the wow tree of the values, verbatim. */}}
{{- define "wowd.config" -}}
{{ dict "wow" .Values.wow | toYaml }}
{{- end }}

{{/*
The metrics port: the port of wow.metrics.listen, which must listen on all
interfaces so the kubelet's probes and Prometheus reach it.
*/}}
{{- define "wowd.metricsPort" -}}
{{- $listen := "" }}
{{- if .Values.wow.metrics }}{{ $listen = index .Values.wow.metrics "listen" | default "" }}{{ end }}
{{- if not $listen }}
{{- fail "wow.metrics.listen must be set (e.g. 0.0.0.0:9464): the probes and Prometheus use it" }}
{{- end }}
{{- $host := regexReplaceAll ":[0-9]+$" $listen "" }}
{{- if or (hasPrefix "127." $host) (eq $host "localhost") (eq $host "[::1]") }}
{{- fail (printf "wow.metrics.listen %q listens on loopback only: use 0.0.0.0:<port> so the probes and Prometheus reach it" $listen) }}
{{- end }}
{{- regexFind "[0-9]+$" $listen }}
{{- end }}

{{/*
Seconds of a Go duration ("30s", "1m30s", "500ms"), rounded up.
*/}}
{{- define "wowd.seconds" -}}
{{- $total := 0.0 }}
{{- range regexFindAll "[0-9.]+(h|ms|us|µs|ns|m|s)" . -1 }}
{{- $n := regexFind "^[0-9.]+" . | float64 }}
{{- $unit := regexReplaceAll "^[0-9.]+" . "" }}
{{- if eq $unit "h" }}{{ $total = addf $total (mulf $n 3600) }}
{{- else if eq $unit "m" }}{{ $total = addf $total (mulf $n 60) }}
{{- else if eq $unit "s" }}{{ $total = addf $total $n }}
{{- else if eq $unit "ms" }}{{ $total = addf $total (divf $n 1000) }}
{{- end }}
{{- end }}
{{- ceil $total | int }}
{{- end }}

{{/*
terminationGracePeriodSeconds: above wow.shutdown.timeout (default 30s), so
a stop can drain, commit and leave the groups before the kubelet kills.
*/}}
{{- define "wowd.terminationGracePeriodSeconds" -}}
{{- $timeout := "30s" }}
{{- if and .Values.wow.shutdown (index .Values.wow.shutdown "timeout") }}{{ $timeout = index .Values.wow.shutdown "timeout" | toString }}{{ end }}
{{- $shutdown := include "wowd.seconds" $timeout | int }}
{{- if kindIs "invalid" .Values.terminationGracePeriodSeconds }}
{{- add $shutdown 15 }}
{{- else if le (int .Values.terminationGracePeriodSeconds) $shutdown }}
{{- fail (printf "terminationGracePeriodSeconds %v must be above wow.shutdown.timeout (%s = %ds)" .Values.terminationGracePeriodSeconds $timeout $shutdown) }}
{{- else }}
{{- int .Values.terminationGracePeriodSeconds }}
{{- end }}
{{- end }}
