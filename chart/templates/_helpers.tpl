{{/* Chart name, truncated to a DNS label. */}}
{{- define "captf-lock-exporter.name" -}}
{{- default .Chart.Name .Values.nameOverride | trunc 63 | trimSuffix "-" }}
{{- end }}

{{/*
Full name: release-chart, or the release name when it already contains the
chart name. Truncated to 63 characters (a DNS label).
*/}}
{{- define "captf-lock-exporter.fullname" -}}
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

{{- define "captf-lock-exporter.namespace" -}}
{{- default .Release.Namespace .Values.namespaceOverride }}
{{- end }}

{{- define "captf-lock-exporter.chart" -}}
{{- printf "%s-%s" .Chart.Name .Chart.Version | replace "+" "_" | trunc 63 | trimSuffix "-" }}
{{- end }}

{{- define "captf-lock-exporter.selectorLabels" -}}
app.kubernetes.io/name: {{ include "captf-lock-exporter.name" . }}
app.kubernetes.io/instance: {{ .Release.Name }}
{{- end }}

{{- define "captf-lock-exporter.labels" -}}
helm.sh/chart: {{ include "captf-lock-exporter.chart" . }}
{{ include "captf-lock-exporter.selectorLabels" . }}
app.kubernetes.io/version: {{ .Chart.AppVersion | quote }}
app.kubernetes.io/component: exporter
app.kubernetes.io/part-of: cluster-api-provider-terraform
app.kubernetes.io/managed-by: {{ .Release.Service }}
{{- end }}

{{- define "captf-lock-exporter.serviceAccountName" -}}
{{- if .Values.serviceAccount.create }}
{{- default (include "captf-lock-exporter.fullname" .) .Values.serviceAccount.name }}
{{- else }}
{{- required "serviceAccount.name is required when serviceAccount.create is false" .Values.serviceAccount.name }}
{{- end }}
{{- end }}

{{- define "captf-lock-exporter.image" -}}
{{- if .Values.image.digest }}
{{- printf "%s@%s" .Values.image.repository .Values.image.digest }}
{{- else }}
{{- printf "%s:%s" .Values.image.repository (default .Chart.AppVersion .Values.image.tag) }}
{{- end }}
{{- end }}

{{/* --listen-address value; an IPv6 host is bracketed. */}}
{{- define "captf-lock-exporter.listenAddress" -}}
{{- if contains ":" .Values.listenHost }}
{{- printf "[%s]:%d" .Values.listenHost (int .Values.port) }}
{{- else }}
{{- printf "%s:%d" .Values.listenHost (int .Values.port) }}
{{- end }}
{{- end }}

{{/*
The RBAC rules: get/list/watch only, on exactly the objects docs/contract.md
section 10 names. One definition for the ClusterRole and the per-namespace Roles.
*/}}
{{- define "captf-lock-exporter.rbacRules" -}}
- apiGroups: ["coordination.k8s.io"]
  resources: ["leases"]
  verbs: ["get", "list", "watch"]
- apiGroups: [""]
  resources: ["pods"]
  verbs: ["get", "list", "watch"]
- apiGroups: ["events.k8s.io"]
  resources: ["events"]
  verbs: ["get", "list", "watch"]
- apiGroups: ["infrastructure.cluster.x-k8s.io"]
  resources: ["terraformclusters", "terraformmachines", "terraformmachinepools", "terraformplans"]
  verbs: ["get", "list", "watch"]
- apiGroups: ["cluster.x-k8s.io"]
  resources: ["clusters"]
  verbs: ["get", "list", "watch"]
{{- end }}

{{/*
Nodes are cluster-scoped: only a ClusterRole can grant them, so only the
all-namespaces install reads them (the lost-node evidence of a lock). A
namespaced install skips the Node watch (captf-lock-exporter.skipResources)
and judges lost nodes on pod evidence alone.
*/}}
{{- define "captf-lock-exporter.nodeRules" -}}
- apiGroups: [""]
  resources: ["nodes"]
  verbs: ["get", "list", "watch"]
{{- end }}

{{/* --skip-resources: skipResources, and nodes for a namespaced install. */}}
{{- define "captf-lock-exporter.skipResources" -}}
{{- $skip := .Values.skipResources | default list }}
{{- if .Values.watchNamespaces }}{{ $skip = append $skip "nodes" }}{{ end }}
{{- uniq $skip | join "," }}
{{- end }}

{{/* Where the certificate's Secret is mounted (tls.crt, tls.key). */}}
{{- define "captf-lock-exporter.tlsDir" -}}
/etc/captf-lock-exporter/tls
{{- end }}

{{/* https or http, as web.tls.enabled says. */}}
{{- define "captf-lock-exporter.scheme" -}}
{{- ternary "https" "http" .Values.web.tls.enabled }}
{{- end }}

{{/* The Service's DNS name: the default TLS server name scrapers verify. */}}
{{- define "captf-lock-exporter.serviceHost" -}}
{{- printf "%s.%s.svc" (include "captf-lock-exporter.fullname" .) (include "captf-lock-exporter.namespace" .) }}
{{- end }}

{{/*
The exporter's only rights that are not get/list/watch (web.auth.enabled):
each request's bearer token is checked with a TokenReview and the caller's
`get` on the path with a SubjectAccessReview. Both are cluster-scoped, so
they are a ClusterRole also when watchNamespaces limits the reads.
*/}}
{{- define "captf-lock-exporter.authRules" -}}
- apiGroups: ["authentication.k8s.io"]
  resources: ["tokenreviews"]
  verbs: ["create"]
- apiGroups: ["authorization.k8s.io"]
  resources: ["subjectaccessreviews"]
  verbs: ["create"]
{{- end }}

{{/*
The Secret holding the serving certificate (tls.crt, tls.key) as
web.tls.type says; empty for selfSigned (made by the exporter at start).
*/}}
{{- define "captf-lock-exporter.tlsSecretName" -}}
{{- $tls := .Values.web.tls }}
{{- if not $tls.enabled }}
{{- else if or (eq $tls.type "helm") (eq $tls.type "certManager") }}
{{- printf "%s-tls" (include "captf-lock-exporter.fullname" .) }}
{{- else if eq $tls.type "existingSecret" }}
{{- required "web.tls.existingSecret.name is required with web.tls.type=existingSecret" $tls.existingSecret.name }}
{{- end }}
{{- end }}

{{/*
The CA the ServiceMonitor trusts by default, as YAML (a SecretKeySelector
under `secret`), or nothing when web.tls.type gives none.
*/}}
{{- define "captf-lock-exporter.defaultCA" -}}
{{- $tls := .Values.web.tls }}
{{- if or (eq $tls.type "helm") (eq $tls.type "certManager") }}
secret:
  name: {{ include "captf-lock-exporter.tlsSecretName" . }}
  key: ca.crt
{{- else if and (eq $tls.type "existingSecret") $tls.existingSecret.caKey }}
secret:
  name: {{ include "captf-lock-exporter.tlsSecretName" . }}
  key: {{ $tls.existingSecret.caKey }}
{{- end }}
{{- end }}

{{/* The DNS names the serving certificate carries (one per line). */}}
{{- define "captf-lock-exporter.tlsDNSNames" -}}
{{- $fullname := include "captf-lock-exporter.fullname" . }}
{{- $ns := include "captf-lock-exporter.namespace" . }}
{{- $fullname }}
{{ printf "%s.%s" $fullname $ns }}
{{ printf "%s.%s.svc" $fullname $ns }}
{{ printf "%s.%s.svc.%s" $fullname $ns .Values.web.tls.clusterDomain }}
{{- end }}
