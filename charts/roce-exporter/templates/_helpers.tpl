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

{{- define "roce-exporter.selectorLabels" -}}
app.kubernetes.io/name: {{ include "roce-exporter.name" . }}
app.kubernetes.io/instance: {{ .Release.Name }}
{{- end -}}

{{- define "roce-exporter.labels" -}}
{{ include "roce-exporter.selectorLabels" . }}
app.kubernetes.io/version: {{ .Chart.AppVersion | quote }}
app.kubernetes.io/managed-by: {{ .Release.Service }}
app.kubernetes.io/part-of: roce-exporter
helm.sh/chart: {{ printf "%s-%s" .Chart.Name .Chart.Version | replace "+" "_" }}
{{- end -}}

{{- define "roce-exporter.image" -}}
{{- $tag := default .Chart.AppVersion .Values.image.tag -}}
{{- if .Values.image.digest -}}
{{ .Values.image.repository }}@{{ .Values.image.digest }}
{{- else -}}
{{ .Values.image.repository }}:{{ $tag }}
{{- end -}}
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

{{/* The relabelings every monitor gets: the job the rules select, and
     instance as node:port. */}}
{{- define "roce-exporter.relabelings" -}}
- action: replace
  targetLabel: job
  replacement: {{ .Values.job }}
- action: replace
  sourceLabels: [__meta_kubernetes_pod_node_name, __meta_kubernetes_pod_container_port_number]
  separator: ":"
  targetLabel: instance
{{- end -}}

{{/* A monitor endpoint's common fields, from .m (the monitor's values). */}}
{{- define "roce-exporter.endpoint" -}}
path: /metrics
interval: {{ .m.interval }}
scrapeTimeout: {{ .m.scrapeTimeout }}
scheme: {{ .m.scheme }}
{{- with .m.tlsConfig }}
tlsConfig:
  {{- toYaml . | nindent 2 }}
{{- end }}
{{- with .m.basicAuth }}
basicAuth:
  {{- toYaml . | nindent 2 }}
{{- end }}
relabelings:
  {{- include "roce-exporter.relabelings" .root | nindent 2 }}
  {{- with .m.relabelings }}
  {{- toYaml . | nindent 2 }}
  {{- end }}
{{- with .m.metricRelabelings }}
metricRelabelings:
  {{- toYaml . | nindent 2 }}
{{- end }}
{{- end -}}
