{{/* The namespace of every namespaced object but the node plugin's. */}}
{{- define "nativedra.namespace" -}}
{{ .Values.namespace.name }}
{{- end }}

{{/* The node plugin's own namespace (PSA privileged); never the other one, which is restricted. */}}
{{- define "nativedra.pluginNamespace" -}}
{{- if eq .Values.namespace.pluginName .Values.namespace.name -}}
{{- fail "namespace.pluginName must differ from namespace.name: the plugin needs a privileged namespace, the rest runs restricted" -}}
{{- end -}}
{{ .Values.namespace.pluginName }}
{{- end }}

{{/* Helm's own labels, added beside each object's labels (never to selectors or pod templates,
so a release can take over objects applied from manifests/base). */}}
{{- define "nativedra.labels" -}}
helm.sh/chart: {{ printf "%s-%s" .Chart.Name .Chart.Version | replace "+" "_" | trunc 63 | trimSuffix "-" }}
app.kubernetes.io/managed-by: {{ .Release.Service }}
app.kubernetes.io/instance: {{ .Release.Name }}
{{- end }}

{{- define "nativedra.image" -}}
{{ .Values.image.repository }}:{{ .Values.image.tag | default .Chart.AppVersion }}
{{- end }}

{{/* image, and imagePullPolicy when set */}}
{{- define "nativedra.imageFields" -}}
image: {{ include "nativedra.image" . }}
{{- with .Values.image.pullPolicy }}
imagePullPolicy: {{ . }}
{{- end }}
{{- end }}

{{/* The plugin's service account as the API server names it (admission policy). */}}
{{- define "nativedra.pluginUser" -}}
system:serviceaccount:{{ include "nativedra.pluginNamespace" . }}:nativedra-plugin
{{- end }}

{{/* The extender's service account as the API server names it (admission policy). */}}
{{- define "nativedra.extenderUser" -}}
system:serviceaccount:{{ include "nativedra.namespace" . }}:nativedra-extender
{{- end }}

{{/* The namespaces whose pods the extender may never evict, as a CEL list: the values' and its own. */}}
{{- define "nativedra.protectedNamespaces" -}}
{{- $names := concat .Values.extender.protectedNamespaces (list (include "nativedra.namespace" .)) | uniq -}}
[{{ range $i, $name := $names }}{{ if $i }}, {{ end }}"{{ $name }}"{{ end }}]
{{- end }}

{{/* A NetworkPolicy ingress rule admitting `port` (metrics) from monitoring.namespaces only; nothing
when the list is empty, so that only the pod's own node (the kubelet's probes) reaches it. Never a
rule without `from`, which would admit everyone. */}}
{{- define "nativedra.monitoringIngress" -}}
{{- with .root.Values.monitoring.namespaces }}
- from:
    {{- range . }}
    - namespaceSelector:
        matchLabels: {kubernetes.io/metadata.name: {{ . }}}
    {{- end }}
  ports:
    - {port: {{ $.port }}, protocol: TCP}
{{- end }}
{{- end }}

{{/* The extender's Service DNS name: its serving certificate's SAN and the scheduler's urlPrefix. */}}
{{- define "nativedra.extenderHost" -}}
nativedra-extender.{{ include "nativedra.namespace" . }}.svc
{{- end }}

{{/* The plugin's arguments: base's, then a simulated inventory, then publish settings that differ
from the plugin's defaults (fractions 2,4,8, MIG on, exclusive GPUs). */}}
{{- define "nativedra.pluginArgs" -}}
{{- $p := .Values.plugin -}}
{{- $args := list "plugin" "--backend" $p.backend -}}
{{- if eq $p.backend "simulated" -}}
{{- $args = concat $args (list "--profile" $p.simulated.profile "--dev-root" "/simulated/dev" "--fault-file" "/simulated/faults.yaml") -}}
{{- end -}}
{{- $args = concat $args (list "--metrics-port" (toString $p.metricsPort)) -}}
{{- if not $p.fractions.enabled -}}
{{- $args = concat $args (list "--fractions" "none") -}}
{{- else if ne (join "," $p.fractions.denominators) "2,4,8" -}}
{{- $args = concat $args (list "--fractions" (join "," $p.fractions.denominators)) -}}
{{- end -}}
{{- if $p.shares.enabled -}}
{{- $args = concat $args (list "--sharing" "consumable") -}}
{{- end -}}
{{- if not $p.mig.enabled -}}
{{- $args = concat $args (list "--mig" "false") -}}
{{- end -}}
{{- if ne $p.faults.fatalEffect "NoSchedule" -}}
{{- $args = concat $args (list "--fatal-fault-effect" $p.faults.fatalEffect) -}}
{{- end -}}
{{- concat $args $p.extraArgs | toJson -}}
{{- end }}

{{/* A pod template's metadata: its component's name label (the selectors'), then the component's
podLabels (never replacing the name) and podAnnotations. Call with (dict "root" $ "name" NAME
"values" .Values.COMPONENT). */}}
{{- define "nativedra.podMetadata" -}}
metadata:
  labels:
    app.kubernetes.io/name: {{ .name }}
    {{- with omit (.values.podLabels | default dict) "app.kubernetes.io/name" }}
    {{- toYaml . | nindent 4 }}
    {{- end }}
  {{- with .values.podAnnotations }}
  annotations:
    {{- toYaml . | nindent 4 }}
  {{- end }}
{{- end }}

{{/* Where a component's pods may run and what they pull with: imagePullSecrets (chart-wide), and
the component's priorityClassName, nodeSelector, tolerations, affinity and
topologySpreadConstraints, each left out when empty. Same arguments as nativedra.podMetadata. */}}
{{- define "nativedra.podPlacement" -}}
{{- with .root.Values.imagePullSecrets }}
imagePullSecrets:
  {{- toYaml . | nindent 2 }}
{{- end }}
{{- with .values.priorityClassName }}
priorityClassName: {{ . }}
{{- end }}
{{- with .values.nodeSelector }}
nodeSelector:
  {{- toYaml . | nindent 2 }}
{{- end }}
{{- with .values.tolerations }}
tolerations:
  {{- toYaml . | nindent 2 }}
{{- end }}
{{- with .values.affinity }}
affinity:
  {{- toYaml . | nindent 2 }}
{{- end }}
{{- with .values.topologySpreadConstraints }}
topologySpreadConstraints:
  {{- toYaml . | nindent 2 }}
{{- end }}
{{- end }}

{{/* The extender Service's fixed ClusterIP (extender.service.clusterIP): the URL a host-network
kube-scheduler calls, with no cluster DNS, and an IP name of the serving certificate. None with the
second scheduler: it runs in a pod and calls the Service's DNS name, and a fixed address outside a
cluster's Service range (EKS, k3s, ...) would fail the install for nothing. */}}
{{- define "nativedra.extenderIP" -}}
{{- if not .Values.secondScheduler.enabled }}{{ .Values.extender.service.clusterIP }}{{ end }}
{{- end }}

{{/* The second scheduler's image: secondScheduler.image, else the kube-scheduler of the cluster's
own release (a scheduler older or newer than the API server is not a supported skew). */}}
{{- define "nativedra.secondSchedulerImage" -}}
{{- with .Values.secondScheduler.image -}}
{{ . }}
{{- else -}}
registry.k8s.io/kube-scheduler:{{ regexFind "^v[0-9]+\\.[0-9]+\\.[0-9]+(-(alpha|beta|rc)\\.[0-9]+)?" .Capabilities.KubeVersion.Version }}
{{- end -}}
{{- end }}

{{/* Fails the install when a marker policy is asked of a release that does not serve
admissionregistration.k8s.io/v1 MutatingAdmissionPolicy by default (GA in 1.36), naming the value. */}}
{{- define "nativedra.requireMarkerPolicies" -}}
{{- if semverCompare "<1.36.0-0" .root.Capabilities.KubeVersion.Version -}}
{{- fail (printf "%s needs Kubernetes 1.36 or newer (MutatingAdmissionPolicy, admissionregistration.k8s.io/v1); this cluster is %s: leave it false and list no managedResources in the scheduler's extender entry (every pod is then sent), or use secondScheduler (docs/install.md, \"Extender outages: what waits\")" .value .root.Capabilities.KubeVersion.Version) -}}
{{- end -}}
{{- end }}
