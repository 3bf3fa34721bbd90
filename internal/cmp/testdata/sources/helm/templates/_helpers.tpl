{{- define "hello.fullname" -}}
{{ .Release.Name }}-{{ .Chart.Name }}
{{- end -}}
