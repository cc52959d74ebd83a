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


{{- /*
The operator's rights on the namespaced kinds: exactly what it does with Brokers,
Topics and their children. The same rules go into the ClusterRole (cluster-wide
install) or into a Role per watched namespace.
*/ -}}
{{- define "skiff.operatorRules" -}}
- apiGroups: [skiff.io]
  resources: [brokers, topics, users]
  verbs: [get, list, watch, patch]
- apiGroups: [skiff.io]
  resources: [brokers/status, topics/status, users/status]
  verbs: [get, patch]
# Children name their Broker (a User's Secret its User) as owner with blockOwnerDeletion.
- apiGroups: [skiff.io]
  resources: [brokers/finalizers, users/finalizers]
  verbs: [update]
- apiGroups: [apps]
  resources: [statefulsets]
  verbs: [get, list, create, patch, delete]
- apiGroups: [""]
  resources: [services, serviceaccounts]
  verbs: [get, list, create, patch, delete]
# watch: Kubernetes lets a Role grant only rights its creator holds, and the brokers'
# Role grants configmaps get/list/watch (the external endpoints map).
- apiGroups: [""]
  resources: [configmaps]
  verbs: [get, list, watch, create, patch, delete]
# Each Broker's replication Secret is created once; so is its admin Secret (auth on),
# which is read to sign the operator's admin calls as the Broker's super user. A User's
# credentials Secret is created once, read (the keys go to every group's master, also
# masters elected later), patched on rotation and deleted with the User. RBAC cannot
# narrow these to the Secrets the operator owns (their names are not known in advance);
# the operator only ever addresses <broker>-replication, <broker>-admin and
# <user>-credentials of objects it reconciles. No list or watch: it never enumerates
# Secrets. patch is also for the brokers' TLS certificate: the operator's CA and the
# certificate it issues and renews (<broker>-ca, <broker>-tls).
- apiGroups: [""]
  resources: [secrets]
  verbs: [get, create, patch, delete]
# spec.tls.issuerRef: the Certificate cert-manager issues the brokers' Secret from.
- apiGroups: [cert-manager.io]
  resources: [certificates]
  verbs: [get, create, patch]
- apiGroups: [rbac.authorization.k8s.io]
  resources: [roles, rolebindings]
  verbs: [get, list, create, patch, delete]
# Status reads the Leases; the other verbs are the brokers' (see the comment above):
# the operator never writes a Lease.
- apiGroups: [coordination.k8s.io]
  resources: [leases]
  verbs: [get, list, watch, create, update, patch]
# Pods are restarted one at a time (replicas before the master) for a new template;
# patch is the brokers' (their role label), granted onwards.
- apiGroups: [""]
  resources: [pods]
  verbs: [get, list, patch, delete]
# spec.metrics.podMonitor; harmless where the Prometheus Operator is not installed.
- apiGroups: [monitoring.coreos.com]
  resources: [podmonitors]
  verbs: [get, list, create, patch, delete]
- apiGroups: [policy]
  resources: [poddisruptionbudgets]
  verbs: [get, list, create, patch, delete]
# Each broker group's NetworkPolicy (deleted when a Broker turns it off).
- apiGroups: [networking.k8s.io]
  resources: [networkpolicies]
  verbs: [get, list, create, patch, delete]
- apiGroups: [""]
  resources: [events]
  verbs: [create]
{{- end -}}
