{{/*
Names. Component objects are "<prefix>-<component>"; the prefix is the release name unless
fullnameOverride is set (release "sparkrun" gives sparkrun-operator, sparkrun-shim, sparkrun-gateway).
*/}}
{{- define "sparkrun.prefix" -}}
{{- default .Release.Name .Values.fullnameOverride | trunc 40 | trimSuffix "-" -}}
{{- end -}}

{{- define "sparkrun.operator.name" -}}{{ include "sparkrun.prefix" . }}-operator{{- end -}}
{{- define "sparkrun.shim.name" -}}{{ include "sparkrun.prefix" . }}-shim{{- end -}}
{{- define "sparkrun.gateway.name" -}}{{ include "sparkrun.prefix" . }}-gateway{{- end -}}
{{- /* The ClusterRole every managed endpoint picker is bound to in its workload's namespace. */}}
{{- define "sparkrun.picker.clusterRole" -}}{{ include "sparkrun.prefix" . }}-endpoint-picker{{- end -}}

{{- define "sparkrun.shim.tlsSecret" -}}
{{- default (printf "%s-tls" (include "sparkrun.shim.name" .)) .Values.shim.tls.existingSecret -}}
{{- end -}}

{{/*
Where the shim's TLS Secret is mounted. Under /var/run/secrets like the ServiceAccount token: a
path every runtime can create a mount point in, also with readOnlyRootFilesystem (the testbed's
process nodes mount volumes only at existing paths or under /run).
*/}}
{{- define "sparkrun.shim.tlsDir" -}}/var/run/secrets/sparkrun.dev/shim-tls{{- end -}}

{{- define "sparkrun.chart" -}}
{{- printf "%s-%s" .Chart.Name .Chart.Version | replace "+" "_" | trunc 63 | trimSuffix "-" -}}
{{- end -}}

{{/* Labels on every object of the chart. */}}
{{- define "sparkrun.labels" -}}
helm.sh/chart: {{ include "sparkrun.chart" . }}
app.kubernetes.io/name: sparkrun-operator
app.kubernetes.io/instance: {{ .Release.Name }}
app.kubernetes.io/version: {{ .Chart.AppVersion | quote }}
app.kubernetes.io/managed-by: {{ .Release.Service }}
app.kubernetes.io/part-of: sparkrun-operator
{{- with .Values.commonLabels }}
{{ toYaml . }}
{{- end }}
{{- end -}}

{{/* Selector labels of one component: include "sparkrun.selector" (list . "gateway") */}}
{{- define "sparkrun.selector" -}}
app.kubernetes.io/name: sparkrun-operator
app.kubernetes.io/instance: {{ (index . 0).Release.Name }}
app.kubernetes.io/component: {{ index . 1 }}
{{- end -}}

{{/* Labels of one component's objects: include "sparkrun.componentLabels" (list . "gateway") */}}
{{- define "sparkrun.componentLabels" -}}
{{ include "sparkrun.labels" (index . 0) }}
app.kubernetes.io/component: {{ index . 1 }}
{{- end -}}

{{/* An image reference from {repository, tag, digest}: the digest replaces the tag, an empty tag
is the chart's appVersion. include "sparkrun.imageRef" (list . .Values.image) */}}
{{- define "sparkrun.imageRef" -}}
{{- $root := index . 0 -}}{{- $image := index . 1 -}}
{{- if $image.digest -}}
{{ $image.repository }}@{{ $image.digest }}
{{- else -}}
{{ $image.repository }}:{{ default $root.Chart.AppVersion $image.tag }}
{{- end -}}
{{- end -}}

{{/* The product image (operator, shim and gateway run the same one). */}}
{{- define "sparkrun.image" -}}{{ include "sparkrun.imageRef" (list . .Values.image) }}{{- end -}}

{{/* The tools image (the operator's --tools-image: download, tool and benchmark Jobs); empty
when values reused from a release older than toolsImage lack it (the operator's default then). */}}
{{- define "sparkrun.toolsImage" -}}
{{- with .Values.toolsImage }}{{ if .repository }}{{ include "sparkrun.imageRef" (list $ .) }}{{ end }}{{ end -}}
{{- end -}}

{{/* A PodDisruptionBudget of a component with more than one replica (maxUnavailable, never blocking a
drain on a not-Ready pod): include "sparkrun.disruptionBudget" (list . "shim" .Values.shim) */}}
{{- define "sparkrun.disruptionBudget" -}}
{{- $root := index . 0 -}}{{- $component := index . 1 -}}{{- $v := index . 2 -}}
{{- $budget := $v.podDisruptionBudget | default dict -}}
{{- if and $budget.enabled (gt (int $v.replicas) 1) }}
apiVersion: policy/v1
kind: PodDisruptionBudget
metadata:
  name: {{ include "sparkrun.prefix" $root }}-{{ $component }}
  namespace: {{ $root.Release.Namespace }}
  labels:
    {{- include "sparkrun.componentLabels" (list $root $component) | nindent 4 }}
spec:
  maxUnavailable: {{ $budget.maxUnavailable | toJson }}
  unhealthyPodEvictionPolicy: AlwaysAllow
  selector:
    matchLabels:
      {{- include "sparkrun.selector" (list $root $component) | nindent 6 }}
{{- end }}
{{- end -}}

{{/* Pod security context shared by the three components. */}}
{{- define "sparkrun.podSecurityContext" -}}
runAsNonRoot: true
runAsUser: 65532
runAsGroup: 65532
fsGroup: 65532
seccompProfile:
  type: RuntimeDefault
{{- end -}}

{{- define "sparkrun.containerSecurityContext" -}}
allowPrivilegeEscalation: false
readOnlyRootFilesystem: true
privileged: false
capabilities:
  drop: [ALL]
{{- end -}}

{{/* Soft or hard pod anti-affinity over nodes: include "sparkrun.antiAffinity" (list . "gateway" "soft") */}}
{{- define "sparkrun.antiAffinity" -}}
{{- $root := index . 0 -}}{{- $component := index . 1 -}}{{- $mode := index . 2 -}}
{{- if eq $mode "hard" }}
podAntiAffinity:
  requiredDuringSchedulingIgnoredDuringExecution:
    - topologyKey: kubernetes.io/hostname
      labelSelector:
        matchLabels:
          {{- include "sparkrun.selector" (list $root $component) | nindent 10 }}
{{- else if eq $mode "soft" }}
podAntiAffinity:
  preferredDuringSchedulingIgnoredDuringExecution:
    - weight: 100
      podAffinityTerm:
        topologyKey: kubernetes.io/hostname
        labelSelector:
          matchLabels:
            {{- include "sparkrun.selector" (list $root $component) | nindent 12 }}
{{- else if ne $mode "none" }}
{{- fail (printf "podAntiAffinity of %s must be soft, hard or none, not %q" $component $mode) }}
{{- end }}
{{- end -}}

{{/* Everything a pod spec takes from a component's scheduling values. */}}
{{- define "sparkrun.scheduling" -}}
{{- $root := index . 0 -}}{{- $component := index . 1 -}}{{- $v := index . 2 -}}
{{- $affinity := include "sparkrun.antiAffinity" (list $root $component $v.podAntiAffinity) | fromYaml -}}
{{- $affinity = merge $affinity (deepCopy ($v.affinity | default dict)) -}}
{{- with $affinity }}
affinity:
  {{- toYaml . | nindent 2 }}
{{- end }}
{{- with $v.nodeSelector }}
nodeSelector:
  {{- toYaml . | nindent 2 }}
{{- end }}
{{- with $v.tolerations }}
tolerations:
  {{- toYaml . | nindent 2 }}
{{- end }}
{{- with $v.priorityClassName }}
priorityClassName: {{ . }}
{{- end }}
{{- with $root.Values.imagePullSecrets }}
imagePullSecrets:
  {{- toYaml . | nindent 2 }}
{{- end }}
{{- end -}}

{{/* The plurals of the sparkrun.dev kinds, quoted, comma-separated; (list "/status") appends a suffix. */}}
{{- define "sparkrun.kinds" -}}
{{- $suffix := "" -}}
{{- if kindIs "slice" . }}{{ $suffix = index . 0 }}{{ end -}}
{{- $out := list -}}
{{- range list "inferenceworkloads" "inferenceclusters" "recipes" "modelcaches" "inferencebenchmarks" "daemonjobs" -}}
{{- $out = append $out (printf "%q" (printf "%s%s" . $suffix)) -}}
{{- end -}}
{{- join ", " $out -}}
{{- end -}}

{{- /* How the gateway authenticates callers: none | apiKeys | kubernetes (gateway.auth.mode;
empty: apiKeys when the deprecated gateway.apiKeys.enabled is on, else none). */}}
{{- define "sparkrun.gateway.authMode" -}}
{{- $mode := .Values.gateway.auth.mode | default "" -}}
{{- if $mode -}}
{{- if not (has $mode (list "none" "apiKeys" "kubernetes")) -}}
{{- fail (printf "gateway.auth.mode must be none, apiKeys or kubernetes, not %q" $mode) -}}
{{- end -}}
{{- $mode -}}
{{- else if .Values.gateway.apiKeys.enabled -}}apiKeys
{{- else -}}none
{{- end -}}
{{- end -}}

{{- /* The namespaces the product serves (watchNamespaces; the deprecated gateway.watchNamespace
counts as one when watchNamespaces is empty), as a JSON list; [] means every namespace. */}}
{{- define "sparkrun.watchNamespaces" -}}
{{- $list := .Values.watchNamespaces | default list -}}
{{- if and (not $list) .Values.gateway.watchNamespace -}}
{{- $list = list .Values.gateway.watchNamespace -}}
{{- end -}}
{{- toJson (uniq $list) -}}
{{- end -}}

{{- /* The engines' policies: the operator makes one per InferenceWorkload (render/networkpolicy.py),
letting in only the workload's own pods, this release's gateway, operator and shim, the
namespace's benchmark runners and networkPolicy.engines.extraIngress; and one per managed
endpoint picker (inferencePool.gatewayFrom on its ext-proc port, networkPolicy.metricsFrom on its
metrics port, nobody else). This is the operator's
--engine-network-policy (templates/operator/deployment.yaml); empty when they are off. The
deprecated engine* values fold in (NOTES.txt says so). */}}
{{- define "sparkrun.enginePolicy" -}}
{{- $np := .Values.networkPolicy -}}
{{- $engines := $np.engines | default dict -}}
{{- if and $np.enabled $engines.enabled -}}
{{- $components := list "operator" -}}
{{- if .Values.gateway.enabled }}{{ $components = append $components "gateway" }}{{ end -}}
{{- if .Values.shim.enabled }}{{ $components = append $components "shim" }}{{ end -}}
{{- $extra := concat ($engines.extraIngress | default list) ($np.engineExtraIngress | default list) -}}
{{- /* issue 31: with the engines' PodMonitor, networkPolicy.metricsFrom may scrape the engine port
(8000: /metrics shares it with the API); metricsFrom empty adds nobody (not "anyone") */ -}}
{{- if and (((.Values.metrics).engines).podMonitor).enabled $np.metricsFrom -}}
{{- $extra = append $extra (dict "from" $np.metricsFrom "ports" (list (dict "port" 8000 "protocol" "TCP"))) -}}
{{- end -}}
{{- $doc := dict "releaseNamespace" .Release.Namespace "components" (sortAlpha $components) -}}
{{- if $extra }}{{ $_ := set $doc "extraIngress" $extra }}{{ end -}}
{{- with (.Values.inferencePool).gatewayFrom }}{{ $_ := set $doc "gatewayFrom" . }}{{ end -}}
{{- /* a managed endpoint picker's metrics port (its own policy): only these; none: closed */ -}}
{{- with $np.metricsFrom }}{{ $_ := set $doc "metricsFrom" . }}{{ end -}}
{{- $_ := set $doc "releaseLabels" (dict "app.kubernetes.io/name" "sparkrun-operator" "app.kubernetes.io/instance" .Release.Name) -}}
{{- if or $engines.restrictEgress $np.engineRestrictEgress -}}
{{- $cidrs := $np.engineEgressCIDRs | default $engines.egressCIDRs -}}
{{- $ports := $np.engineEgressPorts | default $engines.egressPorts -}}
{{- $dns := dict "namespace" $np.dns.namespace "podLabels" $np.dns.podLabels -}}
{{- $_ := set $doc "egress" (dict "dns" $dns "cidrs" $cidrs "ports" $ports) -}}
{{- end -}}
{{- toJson $doc -}}
{{- end -}}
{{- end -}}


{{- /* The operator's --endpoint-picker (issue 30): the managed pickers' settings. */}}
{{- define "sparkrun.endpointPicker" -}}
{{- $picker := .Values.inferencePool.endpointPicker -}}
{{- $doc := dict "image" $picker.image "clusterRole" (include "sparkrun.picker.clusterRole" .) -}}
{{- with $picker.resources }}{{ $_ := set $doc "resources" . }}{{ end -}}
{{- with $picker.nodeSelector }}{{ $_ := set $doc "nodeSelector" . }}{{ end -}}
{{- with $picker.tolerations }}{{ $_ := set $doc "tolerations" . }}{{ end -}}
{{- toJson $doc -}}
{{- end -}}
