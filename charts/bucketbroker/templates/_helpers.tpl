{{- define "bucketbroker.image" -}}
{{ .Values.image.repository }}:{{ .Values.image.tag }}
{{- end -}}

{{- define "bucketbroker.s3RootEnv" -}}
- name: BUCKETBROKER_S3_ROOT_ACCESS_KEY
  valueFrom: {secretKeyRef: {name: {{ .Values.s3RootSecret.name }}, key: accessKey{{ if eq .Values.driver "embedded" }}, optional: {{ .Values.s3RootSecret.optional }}{{ end }}}}
- name: BUCKETBROKER_S3_ROOT_SECRET_KEY
  valueFrom: {secretKeyRef: {name: {{ .Values.s3RootSecret.name }}, key: secretKey{{ if eq .Values.driver "embedded" }}, optional: {{ .Values.s3RootSecret.optional }}{{ end }}}}
{{- end -}}

{{- define "bucketbroker.driverArgs" -}}
{{- if eq .Values.driver "s3iam" }}
- --driver=s3iam
{{- with .Values.s3iam.s3Endpoint }}
- --s3-endpoint={{ . }}
{{- end }}
{{- with .Values.s3iam.iamEndpoint }}
- --iam-endpoint={{ . }}
{{- end }}
{{- if .Values.s3iam.pathStyle }}
- --path-style
{{- end }}
{{- else if eq .Values.driver "minio" }}
- --driver=minio
- --s3-endpoint={{ required "minio.endpoint is required with driver minio" .Values.minio.endpoint }}
{{- else if ne .Values.driver "embedded" }}
{{- fail "driver must be embedded, s3iam or minio" }}
{{- end }}
- --region={{ .Values.region }}
{{- end -}}

{{- define "bucketbroker.securityContext" -}}
securityContext: {allowPrivilegeEscalation: false, readOnlyRootFilesystem: true, capabilities: {drop: [ALL]}}
{{- end -}}

{{- define "bucketbroker.podSecurityContext" -}}
securityContext: {runAsNonRoot: true, runAsUser: 65532, runAsGroup: 65532, fsGroup: 65532, seccompProfile: {type: RuntimeDefault}}
{{- end -}}
