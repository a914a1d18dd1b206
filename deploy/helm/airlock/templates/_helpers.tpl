{{/* The name every object of the release carries. */}}
{{- define "airlock.fullname" -}}
{{- if eq .Release.Name .Chart.Name -}}
{{- .Chart.Name | trunc 63 | trimSuffix "-" -}}
{{- else -}}
{{- printf "%s-%s" .Release.Name .Chart.Name | trunc 63 | trimSuffix "-" -}}
{{- end -}}
{{- end -}}

{{/* Labels that select the daemon's pods (never change on upgrade). */}}
{{- define "airlock.selectorLabels" -}}
app.kubernetes.io/name: {{ .Chart.Name }}
app.kubernetes.io/instance: {{ .Release.Name }}
{{- end -}}

{{/* Labels on every object. */}}
{{- define "airlock.labels" -}}
{{ include "airlock.selectorLabels" . }}
app.kubernetes.io/component: node-daemon
app.kubernetes.io/part-of: airlock
app.kubernetes.io/version: {{ .Chart.AppVersion | quote }}
helm.sh/chart: {{ printf "%s-%s" .Chart.Name .Chart.Version }}
app.kubernetes.io/managed-by: {{ .Release.Service }}
{{- end -}}

{{- define "airlock.image" -}}
{{ .Values.image.repository }}:{{ .Values.image.tag | default .Chart.AppVersion }}
{{- end -}}

{{/* The chained CNI config list: the cluster's main plugins, airlock-cni last. */}}
{{- define "airlock.conflist" -}}
{{- $airlock := dict "type" "airlock-cni" "socket" .Values.config.api.socket "timeout" .Values.cni.timeout "select" .Values.cni.select -}}
{{- /* containerd and CRI-O pass the pod's annotations (the selection) only to a plugin that asks. */ -}}
{{- $_ := set $airlock "capabilities" (dict "io.kubernetes.cri.pod-annotations" true) -}}
{{- $plugins := append .Values.cni.plugins $airlock -}}
{{- dict "cniVersion" .Values.cni.cniVersion "name" .Values.cni.networkName "plugins" $plugins | toPrettyJson -}}
{{- end -}}
