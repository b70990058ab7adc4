{{/* The release's name for every object: the release name, with the chart's unless it has it. */}}
{{- define "agent-reach.fullname" -}}
{{- if contains .Chart.Name .Release.Name -}}
{{- .Release.Name | trunc 63 | trimSuffix "-" -}}
{{- else -}}
{{- printf "%s-%s" .Release.Name .Chart.Name | trunc 63 | trimSuffix "-" -}}
{{- end -}}
{{- end -}}

{{- define "agent-reach.selectorLabels" -}}
app.kubernetes.io/name: {{ .Chart.Name }}
app.kubernetes.io/instance: {{ .Release.Name }}
{{- end -}}

{{- define "agent-reach.labels" -}}
{{ include "agent-reach.selectorLabels" . }}
app.kubernetes.io/version: {{ .Chart.AppVersion | quote }}
app.kubernetes.io/managed-by: {{ .Release.Service }}
helm.sh/chart: {{ printf "%s-%s" .Chart.Name .Chart.Version | replace "+" "_" }}
{{- end -}}

{{- define "agent-reach.serviceAccountName" -}}
{{- if .Values.serviceAccount.create -}}
{{- default (include "agent-reach.fullname" .) .Values.serviceAccount.name -}}
{{- else -}}
{{- default "default" .Values.serviceAccount.name -}}
{{- end -}}
{{- end -}}

{{/* Where the Redis CA is mounted (redis.tlsCaSecret). */}}
{{- define "agent-reach.redisCaDir" -}}/etc/agent-reach-redis-ca{{- end -}}

{{/* The config file: the values' config, with `state` from redis.url when that is set (and
the CA of redis.tlsCaSecret in its query). */}}
{{- define "agent-reach.config" -}}
{{- $config := deepCopy .Values.config -}}
{{- if .Values.redis.url -}}
{{- $url := .Values.redis.url -}}
{{- if .Values.redis.tlsCaSecret -}}
{{- if not (hasPrefix "rediss://" $url) -}}
{{- fail "redis.tlsCaSecret: redis.url must be a rediss:// URL (Redis over TLS)" -}}
{{- end -}}
{{- $url = printf "%s%sssl_ca_certs=%s/ca.crt" $url (ternary "&" "?" (contains "?" $url)) (include "agent-reach.redisCaDir" .) -}}
{{- end -}}
{{- $_ := set $config "state" $url -}}
{{- end -}}
{{- toYaml $config -}}
{{- end -}}

{{/* Seconds from SIGTERM to SIGKILL: more than the pause and serve's shutdown timeout. */}}
{{- define "agent-reach.gracePeriod" -}}
{{- $needed := add (int .Values.preStopSleepSeconds) (int .Values.server.drainDelaySeconds) (int .Values.server.shutdownTimeoutSeconds) -}}
{{- if kindIs "invalid" .Values.terminationGracePeriodSeconds -}}
{{- add $needed 10 -}}
{{- else if le (int .Values.terminationGracePeriodSeconds) (int $needed) -}}
{{- fail (printf "terminationGracePeriodSeconds (%v) must be above preStopSleepSeconds + server.drainDelaySeconds + server.shutdownTimeoutSeconds (%v), or serve is killed before its in-flight requests finish" .Values.terminationGracePeriodSeconds $needed) -}}
{{- else -}}
{{- int .Values.terminationGracePeriodSeconds -}}
{{- end -}}
{{- end -}}
