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

{{/*
The effective wow tree: the values' wow, verbatim, with the example's
contexts and dispatchers (values "example") when it sets none of
contexts, metadata and dispatchers.
*/}}
{{- define "wowd.wow" -}}
{{- $wow := deepCopy (.Values.wow | default dict) }}
{{- if and (not $wow.contexts) (not $wow.metadata) (not $wow.dispatchers) }}
{{- $ex := .Values.example | default dict }}
{{- if $ex.contexts }}{{ $_ := set $wow "contexts" (deepCopy $ex.contexts) }}{{ end }}
{{- if $ex.dispatchers }}{{ $_ := set $wow "dispatchers" (deepCopy $ex.dispatchers) }}{{ end }}
{{- end }}
{{- /* Entries set to null: values written for the chart before the example
moved out of wow removed it so (example-service: null, log-everything:
null); Helm keeps a null whose key the defaults lack. Dropped after the
example's decision, so that such values still mean "not the example". */}}
{{- range $section := list "contexts" "dispatchers" }}
{{- $m := index $wow $section }}
{{- if kindIs "map" $m }}
{{- range $k, $v := $m }}{{ if kindIs "invalid" $v }}{{ $_ := unset $m $k }}{{ end }}{{ end }}
{{- end }}
{{- end }}
{{- toYaml $wow }}
{{- end }}

{{/* The configuration file: the effective wow tree (wowd.wow). */}}
{{- define "wowd.config" -}}
{{ dict "wow" (include "wowd.wow" . | fromYaml) | toYaml }}
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
{{- define "wowd.shutdownTimeout" -}}
{{- $timeout := "30s" }}
{{- if and .Values.wow.shutdown (index .Values.wow.shutdown "timeout") }}{{ $timeout = index .Values.wow.shutdown "timeout" | toString }}{{ end }}
{{- $timeout }}
{{- end }}

{{- define "wowd.terminationGracePeriodSeconds" -}}
{{- $timeout := include "wowd.shutdownTimeout" . }}
{{- $shutdown := include "wowd.seconds" $timeout | int }}
{{- if kindIs "invalid" .Values.terminationGracePeriodSeconds }}
{{- add $shutdown 15 }}
{{- else if lt (int .Values.terminationGracePeriodSeconds) (add $shutdown 15) }}
{{- fail (printf "terminationGracePeriodSeconds %v must be at least wow.shutdown.timeout + 15 s (%s + 15 = %ds): past the timeout wowd still commits what finished (up to 10 s) and leaves its groups" .Values.terminationGracePeriodSeconds $timeout (add $shutdown 15)) }}
{{- else }}
{{- int .Values.terminationGracePeriodSeconds }}
{{- end }}
{{- end }}

{{/*
The receivers of the configuration, as wowd derives them (internal/daemon:
GroupID and the topics of each dispatcher × context), in JSON:
[{"consumerGroup": "...", "context": "...", "dispatcher": "...", "topics": [...]}].
Environment overrides of wow.* (extraEnv) and wow.metadata are not seen here:
autoscaling.kafka.consumerGroups replaces the derivation then.
*/}}
{{- define "wowd.receivers" -}}
{{- $wow := include "wowd.wow" . | fromYaml }}
{{- $kafka := $wow.kafka | default dict }}
{{- $prefix := "wow." }}
{{- if hasKey $kafka "topic-prefix" }}{{ $prefix = index $kafka "topic-prefix" | default "" | toString }}{{ end }}
{{- $contexts := $wow.contexts | default dict }}
{{- $out := list }}
{{- range $dname, $d := ($wow.dispatchers | default dict) }}
{{- $names := $d.contexts | default (keys $contexts | sortAlpha) }}
{{- $groupID := index $d "group-id" | default "" | toString }}
{{- range $cname := $names }}
{{- if not (hasKey $contexts $cname) }}
{{- fail (printf "wow.dispatchers.%s.contexts names %q, which is not in wow.contexts" $dname $cname) }}
{{- end }}
{{- $ctx := index $contexts $cname | default dict }}
{{- $alias := $ctx.alias | default $cname | toString }}
{{- $group := printf "%s.%s.%s" (toString $wow.service) $dname $alias }}
{{- if and $groupID (eq (len $names) 1) }}{{ $group = $groupID }}
{{- else if $groupID }}{{ $group = printf "%s.%s" $groupID $alias }}
{{- end }}
{{- $topics := list }}
{{- range $agg := ($ctx.aggregates | default list) }}
{{- if or (not $d.aggregates) (has $agg $d.aggregates) }}
{{- range $kind := ($d.topics | default list) }}
{{- $topics = append $topics (printf "%s%s.%s.%s" $prefix $alias $agg $kind) }}
{{- end }}
{{- end }}
{{- end }}
{{- if $topics }}{{/* no topic left by the dispatcher's aggregates: wowd makes no receiver */}}
{{- $out = append $out (dict "consumerGroup" $group "dispatcher" $dname "context" $cname "topics" $topics) }}
{{- end }}
{{- end }}
{{- end }}
{{- toJson $out }}
{{- end }}

{{/*
The consumer groups the Kafka scaler watches: autoscaling.kafka.consumerGroups
when given, else the receivers derived from wow.
*/}}
{{- define "wowd.scaledGroups" -}}
{{- $k := .Values.autoscaling.kafka }}
{{- if $k.consumerGroups }}
{{- toJson $k.consumerGroups }}
{{- else }}
{{- if not (include "wowd.wow" . | fromYaml).contexts }}
{{- fail "autoscaling.kafka.consumerGroups must list the consumer groups and their topics when wow.contexts is empty (wow.metadata): the chart cannot read the metadata" }}
{{- end }}
{{- $groups := include "wowd.receivers" . | fromJsonArray }}
{{- if not $groups }}
{{- fail "autoscaling: wow.dispatchers is empty, so there is no consumer group to scale on" }}
{{- end }}
{{- toJson $groups }}
{{- end }}
{{- end }}

{{/*
autoscaling.maxReplicas, defaulting to autoscaling.partitions; the checks
that make the chart refuse autoscaling values that cannot work.
*/}}
{{- define "wowd.maxReplicas" -}}
{{- $a := .Values.autoscaling }}
{{- if kindIs "invalid" $a.partitions }}
{{- fail "autoscaling.partitions must be set with autoscaling.enabled: the partition count of the busiest receiver's topics (the most partitions any one consumer group of this deployment spans), which caps the replicas" }}
{{- end }}
{{- $partitions := int $a.partitions }}
{{- $max := $partitions }}
{{- if not (kindIs "invalid" $a.maxReplicas) }}{{ $max = int $a.maxReplicas }}{{ end }}
{{- if gt $max $partitions }}
{{- fail (printf "autoscaling.maxReplicas %d is above autoscaling.partitions %d: a replica beyond the partitions of the busiest receiver gets none and sits idle. Lower autoscaling.maxReplicas to at most %d, or raise autoscaling.partitions if the topics have more partitions" $max $partitions $partitions) }}
{{- end }}
{{- if gt (int $a.minReplicas) $max }}
{{- fail (printf "autoscaling.minReplicas %d is above the maximum of %d replicas (autoscaling.maxReplicas, or autoscaling.partitions when it is empty): lower autoscaling.minReplicas" (int $a.minReplicas) $max) }}
{{- end }}
{{- if and (eq $a.scaler "prometheus") (lt (int $a.minReplicas) 1) }}
{{- fail "autoscaling.minReplicas must be at least 1 with autoscaling.scaler=prometheus: with no replica, nothing exports wowd_receiver_lag_records and the deployment would never scale up again" }}
{{- end }}
{{- $shutdown := include "wowd.seconds" (include "wowd.shutdownTimeout" .) | int }}
{{- $down := $a.scaleDown }}
{{- if le (int $down.stabilizationWindowSeconds) $shutdown }}
{{- fail (printf "autoscaling.scaleDown.stabilizationWindowSeconds %d must be above wow.shutdown.timeout (%ds): a replica removed drains for up to that long, and a scale-down decided meanwhile stacks rebalances on a drain. Raise autoscaling.scaleDown.stabilizationWindowSeconds (or lower wow.shutdown.timeout)" (int $down.stabilizationWindowSeconds) $shutdown) }}
{{- end }}
{{- if le (int $down.periodSeconds) $shutdown }}
{{- fail (printf "autoscaling.scaleDown.periodSeconds %d must be above wow.shutdown.timeout (%ds): removals closer together than a drain stack rebalances on a drain. Raise autoscaling.scaleDown.periodSeconds (or lower wow.shutdown.timeout)" (int $down.periodSeconds) $shutdown) }}
{{- end }}
{{- $max }}
{{- end }}
