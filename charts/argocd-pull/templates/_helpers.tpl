{{/* Names */}}
{{- define "argocd-pull.name" -}}
{{- default .Chart.Name .Values.nameOverride | trunc 63 | trimSuffix "-" }}
{{- end }}

{{- define "argocd-pull.fullname" -}}
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

{{/* Labels of every object; "argocd-pull.labels" needs a dict with the root context and the component. */}}
{{- define "argocd-pull.labels" -}}
helm.sh/chart: {{ printf "%s-%s" .root.Chart.Name .root.Chart.Version | replace "+" "_" | trunc 63 | trimSuffix "-" }}
{{ include "argocd-pull.selectorLabels" . }}
app.kubernetes.io/version: {{ .root.Chart.AppVersion | quote }}
app.kubernetes.io/managed-by: {{ .root.Release.Service }}
app.kubernetes.io/part-of: argocd-pull
{{- end }}

{{- define "argocd-pull.selectorLabels" -}}
app.kubernetes.io/name: {{ include "argocd-pull.name" .root }}
app.kubernetes.io/instance: {{ .root.Release.Name }}
{{- if .component }}
app.kubernetes.io/component: {{ .component }}
{{- end }}
{{- end }}

{{- define "argocd-pull.image" -}}
{{- if .Values.image.digest -}}
{{ .Values.image.repository }}@{{ .Values.image.digest }}
{{- else -}}
{{ .Values.image.repository }}:{{ .Values.image.tag | default .Chart.AppVersion }}
{{- end }}
{{- end }}

{{- define "argocd-pull.controllerServiceAccountName" -}}
{{- if .Values.serviceAccount.create }}
{{- default (printf "%s-controller" (include "argocd-pull.fullname" .)) .Values.serviceAccount.name }}
{{- else }}
{{- default "default" .Values.serviceAccount.name }}
{{- end }}
{{- end }}

{{/* The server: whether this release runs one, its Service's address, and the scheme of its listeners. */}}
{{- define "argocd-pull.serverHost" -}}
{{ include "argocd-pull.fullname" . }}-server.{{ .Release.Namespace }}.svc
{{- end }}

{{- define "argocd-pull.serverScheme" -}}
{{ ternary "https" "http" .Values.server.tls.enabled }}
{{- end }}

{{/* The controller's gRPC endpoint and REST URL of the server: the values, else this release's server. */}}
{{- define "argocd-pull.controllerGRPCAddress" -}}
{{- .Values.controller.grpc.address | default (printf "%s:%d" (include "argocd-pull.serverHost" .) (int .Values.server.service.ports.sourceGRPC)) }}
{{- end }}

{{- define "argocd-pull.controllerRESTURL" -}}
{{- .Values.controller.grpc.restURL | default (printf "%s://%s:%d" (include "argocd-pull.serverScheme" .) (include "argocd-pull.serverHost" .) (int .Values.server.service.ports.http)) }}
{{- end }}

{{/* The Secret and key of the CA bundle that verifies the server, or nothing (a plain-text server). */}}
{{- define "argocd-pull.controllerCASecret" -}}
{{- if .Values.controller.grpc.caSecret.name -}}
{{ .Values.controller.grpc.caSecret.name }}
{{- else if and .Values.server.enabled .Values.server.tls.enabled -}}
{{ .Values.server.tls.secretName }}
{{- end }}
{{- end }}

{{/* The Secret with the server's database URL. */}}
{{- define "argocd-pull.databaseSecret" -}}
{{- if .Values.postgresql.enabled -}}
{{ include "argocd-pull.fullname" . }}-database
{{- else -}}
{{ .Values.server.database.existingSecret }}
{{- end }}
{{- end }}

{{- define "argocd-pull.databaseSecretKey" -}}
{{- ternary "url" .Values.server.database.key .Values.postgresql.enabled }}
{{- end }}

{{/* Scheduling fields shared by the pod templates; takes the component's values. */}}
{{- define "argocd-pull.scheduling" -}}
{{- with .nodeSelector }}
nodeSelector:
  {{- toYaml . | nindent 2 }}
{{- end }}
{{- with .tolerations }}
tolerations:
  {{- toYaml . | nindent 2 }}
{{- end }}
{{- with .affinity }}
affinity:
  {{- toYaml . | nindent 2 }}
{{- end }}
{{- with .topologySpreadConstraints }}
topologySpreadConstraints:
  {{- toYaml . | nindent 2 }}
{{- end }}
{{- with .priorityClassName }}
priorityClassName: {{ . }}
{{- end }}
{{- end }}
