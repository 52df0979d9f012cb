{{/* The chart's name, at most 63 characters (a DNS label). */}}
{{- define "batchbridge-operator.name" -}}
{{- default .Chart.Name .Values.nameOverride | trunc 63 | trimSuffix "-" }}
{{- end }}

{{/*
The release's full name, the name of its objects: the release name when it already holds
the chart's name, else RELEASE-CHART; at most 63 characters.
*/}}
{{- define "batchbridge-operator.fullname" -}}
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

{{- define "batchbridge-operator.chart" -}}
{{- printf "%s-%s" .Chart.Name .Chart.Version | replace "+" "_" | trunc 63 | trimSuffix "-" }}
{{- end }}

{{- define "batchbridge-operator.selectorLabels" -}}
app.kubernetes.io/name: {{ include "batchbridge-operator.name" . }}
app.kubernetes.io/instance: {{ .Release.Name }}
{{- end }}

{{- define "batchbridge-operator.labels" -}}
helm.sh/chart: {{ include "batchbridge-operator.chart" . }}
{{ include "batchbridge-operator.selectorLabels" . }}
app.kubernetes.io/version: {{ .Chart.AppVersion | quote }}
app.kubernetes.io/component: operator
app.kubernetes.io/part-of: batchbridge
app.kubernetes.io/managed-by: {{ .Release.Service }}
{{- end }}

{{- define "batchbridge-operator.serviceAccountName" -}}
{{- if .Values.serviceAccount.create }}
{{- default (include "batchbridge-operator.fullname" .) .Values.serviceAccount.name }}
{{- else }}
{{- required "serviceAccount.name is required when serviceAccount.create is false" .Values.serviceAccount.name }}
{{- end }}
{{- end }}

{{/*
The operator's image; the log pods run it too (OPERATOR_IMAGE). No registry publishes one,
so an install without image.repository stops here rather than pulling nothing.
*/}}
{{- define "batchbridge-operator.image" -}}
{{- $repository := required "image.repository is required: build the operator's image (docker build -t batchbridge-operator:TAG . in the repository), push it to a registry your cluster pulls from or load it into kind/minikube (README, \"Deploy on Kubernetes\"), then --set image.repository=..." .Values.image.repository }}
{{- printf "%s:%s" $repository (default .Chart.AppVersion .Values.image.tag | toString) }}
{{- end }}

{{/*
The ValidatingAdmissionPolicy of files/log-pod-policy.yaml (a symbolic link to
deploy/rbac/log-pod-policy.yaml, which the kustomize base uses as it is), with this
release's operator account and image in place of the file's: the file's literals are
replaced, and a file that no longer holds them fails the render instead of fencing the
wrong account.
*/}}
{{- define "batchbridge-operator.logPodPolicySpec" -}}
{{- $file := .Files.Get "files/log-pod-policy.yaml" }}
{{- if not $file }}
{{- fail "files/log-pod-policy.yaml is missing from the chart (a symbolic link to deploy/rbac/; package the chart from a checkout)" }}
{{- end }}
{{- $account := "system:serviceaccount:batchbridge-system:batchbridge-operator" }}
{{- $image := "'batchbridge-operator:0.1.0'" }}
{{- range (list $account $image) }}
{{- if not (contains . $file) }}
{{- fail (printf "files/log-pod-policy.yaml no longer holds %s, which the chart replaces" .) }}
{{- end }}
{{- end }}
{{- $ours := printf "system:serviceaccount:%s:%s" .Release.Namespace (include "batchbridge-operator.serviceAccountName" .) }}
{{- $policy := $file | replace $account $ours | replace $image (printf "'%s'" (include "batchbridge-operator.image" .)) | fromYaml }}
{{- toYaml $policy.spec }}
{{- end }}

{{/*
The rules of a Role or ClusterRole file under files/ (symbolic links to deploy/rbac/, the
single source of the operator's permissions). Fails the render when the file is missing or
holds no rules, rather than granting nothing silently.
*/}}
{{- define "batchbridge-operator.rulesOf" -}}
{{- $file := .Files.Get .path }}
{{- if not $file }}
{{- fail (printf "%s is missing from the chart (a symbolic link to deploy/rbac/; package the chart from a checkout)" .path) }}
{{- end }}
{{- $role := fromYaml $file }}
{{- if $role.Error }}
{{- fail (printf "%s: %s" .path $role.Error) }}
{{- end }}
{{- if not $role.rules }}
{{- fail (printf "%s holds no rules" .path) }}
{{- end }}
{{- toYaml $role.rules }}
{{- end }}
