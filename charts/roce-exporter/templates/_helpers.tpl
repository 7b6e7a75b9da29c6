{{/* Names, labels, the image and the pieces several templates share.
     Helper names and their meaning follow prometheus-node-exporter's chart
     (prometheus-community/helm-charts, charts/prometheus-node-exporter). */}}

{{- define "roce-exporter.name" -}}
{{- default .Chart.Name .Values.nameOverride | trunc 63 | trimSuffix "-" -}}
{{- end -}}

{{- define "roce-exporter.fullname" -}}
{{- if .Values.fullnameOverride -}}
{{- .Values.fullnameOverride | trunc 63 | trimSuffix "-" -}}
{{- else if contains (include "roce-exporter.name" .) .Release.Name -}}
{{- .Release.Name | trunc 63 | trimSuffix "-" -}}
{{- else -}}
{{- printf "%s-%s" .Release.Name (include "roce-exporter.name" .) | trunc 63 | trimSuffix "-" -}}
{{- end -}}
{{- end -}}

{{/* The namespace of every object: namespaceOverride, else the release's. */}}
{{- define "roce-exporter.namespace" -}}
{{- default .Release.Namespace .Values.namespaceOverride -}}
{{- end -}}

{{- define "roce-exporter.selectorLabels" -}}
app.kubernetes.io/name: {{ include "roce-exporter.name" . }}
app.kubernetes.io/instance: {{ .Release.Name }}
{{- end -}}

{{- define "roce-exporter.labels" -}}
{{ include "roce-exporter.selectorLabels" . }}
app.kubernetes.io/version: {{ .Chart.AppVersion | quote }}
app.kubernetes.io/managed-by: {{ .Release.Service }}
app.kubernetes.io/component: metrics
app.kubernetes.io/part-of: roce-exporter
helm.sh/chart: {{ printf "%s-%s" .Chart.Name .Chart.Version | replace "+" "_" | trunc 63 | trimSuffix "-" }}
{{- with .Values.commonLabels }}
{{ tpl (toYaml .) $ }}
{{- end }}
{{- if .Values.releaseLabel }}
release: {{ .Release.Name }}
{{- end }}
{{- end -}}

{{/* The common labels with .extra (a monitor's or rule's
     additionalLabels) over them: one key, one value. */}}
{{- define "roce-exporter.labelsWith" -}}
{{- toYaml (merge (deepCopy (default dict .extra)) (include "roce-exporter.labels" .root | fromYaml)) -}}
{{- end -}}

{{- define "roce-exporter.serviceAccountName" -}}
{{- if .Values.serviceAccount.create -}}
{{- default (include "roce-exporter.fullname" .) .Values.serviceAccount.name -}}
{{- else -}}
{{- default "default" .Values.serviceAccount.name -}}
{{- end -}}
{{- end -}}

{{/* registry/repository:tag[@digest]; global.imageRegistry overrides the
     registry (an umbrella chart's mirror). */}}
{{- define "roce-exporter.image" -}}
{{- $registry := default .Values.image.registry .Values.global.imageRegistry -}}
{{- $repo := ternary (printf "%s/%s" $registry .Values.image.repository) .Values.image.repository (ne $registry "") -}}
{{- $tag := default .Chart.AppVersion .Values.image.tag -}}
{{- if .Values.image.digest -}}
{{ $repo }}:{{ $tag }}@{{ .Values.image.digest }}
{{- else -}}
{{ $repo }}:{{ $tag }}
{{- end -}}
{{- end -}}

{{/* imagePullSecrets of .list and global.imagePullSecrets, each either a
     name or {name: ...}, as node-exporter's chart takes them. */}}
{{- define "roce-exporter.imagePullSecrets" -}}
{{- range (concat .root.Values.global.imagePullSecrets .list) }}
{{- if kindIs "map" . }}
- {{ toYaml . | trim }}
{{- else }}
- name: {{ . }}
{{- end }}
{{- end }}
{{- end -}}

{{/* Whether the exporter serves TLS, and whether basic auth guards it. */}}
{{- define "roce-exporter.tls" -}}
{{- if and .Values.webConfig.enabled (hasKey .Values.webConfig.config "tls_server_config") -}}true{{- end -}}
{{- end -}}
{{- define "roce-exporter.basicAuth" -}}
{{- if and .Values.webConfig.enabled (hasKey .Values.webConfig.config "basic_auth_users") -}}true{{- end -}}
{{- end -}}

{{/* The exporter's configuration: `config` with the probe sections merged. */}}
{{- define "roce-exporter.config" -}}
{{- $c := deepCopy .Values.config -}}
{{- if .Values.probes.enabled -}}
{{- $_ := set $c "probes" (dict "enabled" "auto" "interval" .Values.probes.interval "gid_index" .Values.probes.gid_index) -}}
{{- else -}}
{{- $_ := set $c "probes" (dict "enabled" false) -}}
{{- end -}}
{{- if .Values.peerProbes.enabled -}}
{{- $_ := set $c "peer_probes" (merge (dict "enabled" true) (deepCopy .Values.peerProbes.config)) -}}
{{- end -}}
{{- toYaml $c -}}
{{- end -}}

{{/* PromQL matchers of this release's series: prometheusRule.selector, or
     job="<job>" and, with `cluster` set, <clusterLabel>="<cluster>". */}}
{{- define "roce-exporter.selector" -}}
{{- if .Values.prometheusRule.selector -}}
{{- .Values.prometheusRule.selector -}}
{{- else -}}
{{- $m := list (printf "job=%s" (.Values.job | quote)) -}}
{{- if .Values.cluster -}}
{{- $m = append $m (printf "%s=%s" .Values.clusterLabel (.Values.cluster | quote)) -}}
{{- end -}}
{{- join ", " $m -}}
{{- end -}}
{{- end -}}

{{/* The relabelings every monitor gets: the job the rules select (unless
     jobLabel names the label that carries it), the cluster label when
     `cluster` is set, and instance as node:port (alerts link to
     http://<instance>/runbook/...: it reaches the exporter on the node). */}}
{{- define "roce-exporter.relabelings" -}}
{{- if not .m.jobLabel }}
- action: replace
  targetLabel: job
  replacement: {{ .root.Values.job | quote }}
{{- end }}
{{- with .root.Values.cluster }}
- action: replace
  targetLabel: {{ $.root.Values.clusterLabel }}
  replacement: {{ . | quote }}
{{- end }}
- action: replace
  sourceLabels: [__meta_kubernetes_pod_node_name, __meta_kubernetes_pod_container_port_number]
  separator: ":"
  targetLabel: instance
{{- end -}}

{{/* A monitor endpoint's fields, from .m (prometheus.monitor or
     prometheus.podMonitor). */}}
{{- define "roce-exporter.endpoint" -}}
path: /metrics
scheme: {{ default (ternary "https" "http" (eq (include "roce-exporter.tls" .root) "true")) .m.scheme }}
{{- with .m.interval }}
interval: {{ . }}
{{- end }}
{{- with .m.scrapeTimeout }}
scrapeTimeout: {{ . }}
{{- end }}
{{- with .m.proxyUrl }}
proxyUrl: {{ . }}
{{- end }}
{{- with .m.tlsConfig }}
tlsConfig:
  {{- toYaml . | nindent 2 }}
{{- end }}
{{- with .m.basicAuth }}
basicAuth:
  {{- toYaml . | nindent 2 }}
{{- end }}
relabelings:
  {{- include "roce-exporter.relabelings" . | nindent 2 }}
  {{- with .m.relabelings }}
  {{- toYaml . | nindent 2 }}
  {{- end }}
{{- with .m.metricRelabelings }}
metricRelabelings:
  {{- toYaml . | nindent 2 }}
{{- end }}
{{- end -}}

{{/* The per-scrape limits of a monitor's spec (0: unset), as
     node-exporter's chart names them. */}}
{{- define "roce-exporter.scrapeLimits" -}}
{{- range $k := list "sampleLimit" "targetLimit" "labelLimit" "labelNameLengthLimit" "labelValueLengthLimit" }}
{{- with index $.m $k }}
{{ $k }}: {{ . }}
{{- end }}
{{- end }}
{{- end -}}

{{/* A job label value named by jobLabel must be the `job` the rules
     select: the label is looked up where the chart sets it. */}}
{{- define "roce-exporter.checkJobLabel" -}}
{{- with .m.jobLabel -}}
{{- $v := index (merge (dict) $.labels $.root.Values.commonLabels) . | default "" -}}
{{- if and $v (ne (toString $v) $.root.Values.job) -}}
{{- fail (printf "%s.jobLabel %s gives job=%q but `job` is %q: the rules and dashboards would select nothing; set job: %s" $.what . $v $.root.Values.job $v) -}}
{{- end -}}
{{- end -}}
{{- end -}}
