{{- define "skiff.fullname" -}}
{{- if contains .Chart.Name .Release.Name -}}
{{- .Release.Name | trunc 50 | trimSuffix "-" -}}
{{- else -}}
{{- printf "%s-%s" .Release.Name .Chart.Name | trunc 50 | trimSuffix "-" -}}
{{- end -}}
{{- end -}}

{{- define "skiff.operatorName" -}}
{{- printf "%s-operator" (include "skiff.fullname" .) -}}
{{- end -}}

{{- define "skiff.serviceAccountName" -}}
{{- default (include "skiff.operatorName" .) .Values.serviceAccount.name -}}
{{- end -}}

{{- define "skiff.labels" -}}
helm.sh/chart: {{ printf "%s-%s" .Chart.Name .Chart.Version | replace "+" "_" }}
app.kubernetes.io/part-of: skiff
app.kubernetes.io/instance: {{ .Release.Name }}
app.kubernetes.io/version: {{ .Chart.AppVersion | quote }}
app.kubernetes.io/managed-by: {{ .Release.Service }}
{{- end -}}

{{- define "skiff.operatorSelector" -}}
app.kubernetes.io/name: skiff-operator
app.kubernetes.io/instance: {{ .Release.Name }}
{{- end -}}
