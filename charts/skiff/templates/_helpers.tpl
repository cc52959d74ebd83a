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

{{- /*
The namespaces the operator watches, comma-separated: operator.watchNamespaces, else
the release namespace; "" (every namespace) only with rbac.clusterWide=true.
*/ -}}
{{- define "skiff.watchedNamespaces" -}}
{{- if .Values.operator.watchNamespaces -}}
{{- join "," .Values.operator.watchNamespaces -}}
{{- else if not .Values.rbac.clusterWide -}}
{{- .Release.Namespace -}}
{{- end -}}
{{- end -}}

{{- define "skiff.operatorSelector" -}}
app.kubernetes.io/name: skiff-operator
app.kubernetes.io/instance: {{ .Release.Name }}
{{- end -}}


{{- /*
The operator's rights on the namespaced kinds: exactly the calls its code makes (each
rule says which), verb by verb; nothing is listed or watched that it only reads by
name. The same rules go into a Role in each watched namespace (the default) or, with
rbac.clusterWide=true, into the ClusterRole.
*/ -}}
{{- define "skiff.operatorRules" -}}
# Watched and annotated (kopf's progress and finalizer); Topics and Users read their Broker.
- apiGroups: [skiff.io]
  resources: [brokers, topics, users]
  verbs: [get, list, watch, patch]
- apiGroups: [skiff.io]
  resources: [brokers/status, topics/status, users/status]
  verbs: [patch]
# Children name their Broker (a User's Secret its User) as owner with blockOwnerDeletion.
- apiGroups: [skiff.io]
  resources: [brokers/finalizers, users/finalizers]
  verbs: [update]
# Children are server-side applied (create and patch); get for status and the name
# check of the bootstrap Service; list and delete when a group is scaled away.
- apiGroups: [apps]
  resources: [statefulsets]
  verbs: [get, list, create, patch, delete]
- apiGroups: [""]
  resources: [services]
  verbs: [get, list, create, patch, delete]
- apiGroups: [""]
  resources: [configmaps]
  verbs: [get, list, create, patch, delete]
- apiGroups: [policy]
  resources: [poddisruptionbudgets]
  verbs: [list, create, patch, delete]
# Each broker group's NetworkPolicy (deleted when a Broker turns it off).
- apiGroups: [networking.k8s.io]
  resources: [networkpolicies]
  verbs: [list, create, patch, delete]
# The brokers' ServiceAccount, Role and RoleBinding, applied with the Broker (removed
# with it by garbage collection).
- apiGroups: [""]
  resources: [serviceaccounts]
  verbs: [create, patch]
- apiGroups: [rbac.authorization.k8s.io]
  resources: [roles, rolebindings]
  verbs: [create, patch]
# Each Broker's replication Secret is created once; so is its admin Secret (auth on),
# which is read to sign the operator's admin calls as the Broker's super user. A User's
# credentials Secret is created once, read (the keys go to every group's master, also
# masters elected later) and patched on rotation; it goes with its User by garbage
# collection, so no delete. The brokers' TLS Secrets (<broker>-ca, <broker>-tls) are
# read and patched on renewal. RBAC cannot narrow these to the Secrets the operator owns
# (their names are not known in advance); it only ever addresses those names of objects
# it reconciles. No list or watch: it never enumerates Secrets.
- apiGroups: [""]
  resources: [secrets]
  verbs: [get, create, patch]
# spec.tls.issuerRef: the Certificate cert-manager issues the brokers' Secret from.
- apiGroups: [cert-manager.io]
  resources: [certificates]
  verbs: [create, patch]
# spec.metrics.podMonitor; harmless where the Prometheus Operator is not installed.
- apiGroups: [monitoring.coreos.com]
  resources: [podmonitors]
  verbs: [create, patch, delete]
# get: status reads each group's Lease; patch: the operator makes the Broker own it.
# list, create and update are the brokers' (each Broker's Role grants them, by name
# where RBAC allows): Kubernetes lets the operator write a Role granting only what it
# holds itself. It never creates, updates or lists a Lease.
- apiGroups: [coordination.k8s.io]
  resources: [leases]
  verbs: [get, list, create, update, patch]
# list and delete: outdated pods are restarted one at a time (replicas before the
# master) for a new template. patch is kept only to grant it: each Broker's Role lets
# its brokers label their own pods (by name) with their role, and Kubernetes lets the
# operator grant only what it holds. The operator never patches a pod.
- apiGroups: [""]
  resources: [pods]
  verbs: [list, delete, patch]
- apiGroups: [""]
  resources: [events]
  verbs: [create]
{{- end -}}
