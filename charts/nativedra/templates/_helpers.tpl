{{/* The namespace of every namespaced object. */}}
{{- define "nativedra.namespace" -}}
{{ .Values.namespace.name }}
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
system:serviceaccount:{{ include "nativedra.namespace" . }}:nativedra-plugin
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
{{- concat $args $p.extraArgs | toJson -}}
{{- end }}
