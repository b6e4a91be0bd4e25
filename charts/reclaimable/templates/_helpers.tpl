{{/*
Labels every object of the release carries besides its own: those of the
kustomize installation (part-of), and Helm's.
*/}}
{{- define "reclaimable.labels" -}}
app.kubernetes.io/part-of: reclaimable
app.kubernetes.io/managed-by: {{ .Release.Service }}
helm.sh/chart: {{ printf "%s-%s" .Chart.Name .Chart.Version | replace "+" "_" }}
{{- end }}

{{/* The controllers' image; its tag defaults to the chart's appVersion. */}}
{{- define "reclaimable.image" -}}
{{ .Values.image.repository }}:{{ .Values.image.tag | default .Chart.AppVersion }}
{{- end }}

{{/*
The ServiceAccount a controller runs as: its own, or with mode all the one
they share.
*/}}
{{- define "reclaimable.serviceAccount" -}}
{{- if eq .root.Values.mode "all" }}reclaimable{{ else }}reclaimable-{{ .controller }}{{ end }}
{{- end }}

{{/* The flags every controller gets from the values. */}}
{{- define "reclaimable.commonArgs" -}}
- --controller-id=$(CONTROLLER_ID)
- --provisioner-name=$(PROVISIONER_NAME)
{{- if not .Values.leaderElection }}
- --leader-elect=false
{{- end }}
{{- if ne .Values.logging.format "text" }}
- --logging-format={{ .Values.logging.format }}
{{- end }}
{{- if .Values.logging.verbosity }}
- --v={{ .Values.logging.verbosity }}
{{- end }}
{{- end }}

{{/*
A controller's Deployment. Parameters: root (the chart's context),
component (podwatcher, provisioner, releaser or all), values (its values:
replicas, resources), provisions (it runs the provisioner: the share, the
credentials and the lifecycle flags), spread (replicas go to different nodes
unless the values give an affinity).
*/}}
{{- define "reclaimable.deployment" -}}
{{- $root := .root -}}
{{- $name := ternary "reclaimable" (printf "reclaimable-%s" .component) (eq .component "all") -}}
{{- $container := ternary "reclaimable" .component (eq .component "all") -}}
apiVersion: apps/v1
kind: Deployment
metadata:
  name: {{ $name }}
  namespace: {{ $root.Values.namespace }}
  labels:
    app.kubernetes.io/name: reclaimable
    app.kubernetes.io/component: {{ .component }}
    {{- include "reclaimable.labels" $root | nindent 4 }}
spec:
  replicas: {{ .values.replicas }}
  selector:
    matchLabels:
      app.kubernetes.io/name: reclaimable
      app.kubernetes.io/component: {{ .component }}
  template:
    metadata:
      labels:
        app.kubernetes.io/name: reclaimable
        app.kubernetes.io/component: {{ .component }}
      annotations:
        prometheus.io/scrape: "true"
        prometheus.io/port: "8080"
        prometheus.io/path: /metrics
        {{- with $root.Values.podAnnotations }}
        {{- toYaml . | nindent 8 }}
        {{- end }}
    spec:
      serviceAccountName: {{ $name }}
      {{- with $root.Values.imagePullSecrets }}
      imagePullSecrets:
        {{- toYaml . | nindent 8 }}
      {{- end }}
      {{- with $root.Values.priorityClassName }}
      priorityClassName: {{ . }}
      {{- end }}
      securityContext:
        runAsNonRoot: true
        runAsUser: 65532
        runAsGroup: 65532
        {{- if .provisions }}
        # Makes the credentials readable by the process, and a share whose
        # volume type supports ownership writable, without a recursive
        # chown of every volume in it at each start.
        fsGroup: 65532
        fsGroupChangePolicy: OnRootMismatch
        {{- end }}
        seccompProfile:
          type: RuntimeDefault
      containers:
        - name: {{ $container }}
          image: {{ include "reclaimable.image" $root }}
          {{- with $root.Values.image.pullPolicy }}
          imagePullPolicy: {{ . }}
          {{- end }}
          args:
            - {{ .component }}
            {{- include "reclaimable.commonArgs" $root | nindent 12 }}
            {{- if .provisions }}
            - --directory-root=/var/lib/reclaimable
            - --lifecycle-namespace=$(LIFECYCLE_NAMESPACE)
            - --lifecycle-pod-template=reclaimable-lifecycle
            {{- end }}
            {{- range $root.Values.extraArgs }}
            - {{ . | quote }}
            {{- end }}
          env:
            # The installation's settings, from the values: every controller
            # gets the same.
            - name: CONTROLLER_ID
              value: {{ $root.Values.controllerID | quote }}
            - name: PROVISIONER_NAME
              value: {{ $root.Values.provisionerName | quote }}
            {{- if .provisions }}
            - name: LIFECYCLE_NAMESPACE
              value: {{ $root.Values.lifecycleNamespace | quote }}
            {{- end }}
            # Where the leader-election Leases live.
            - name: POD_NAMESPACE
              valueFrom:
                fieldRef:
                  fieldPath: metadata.namespace
            # The container's memory limit, which the process turns into
            # the Go runtime's soft limit (90% of it).
            - name: MEMORY_LIMIT
              valueFrom:
                resourceFieldRef:
                  resource: limits.memory
          ports:
            - name: metrics
              containerPort: 8080
              protocol: TCP
            - name: health
              containerPort: 8081
              protocol: TCP
          livenessProbe:
            httpGet:
              path: /healthz
              port: health
            periodSeconds: 10
            failureThreshold: 3
          readinessProbe:
            httpGet:
              path: /readyz
              port: health
            periodSeconds: 5
            failureThreshold: 2
          resources:
            {{- toYaml .values.resources | nindent 12 }}
          securityContext:
            allowPrivilegeEscalation: false
            readOnlyRootFilesystem: true
            capabilities:
              drop: [ALL]
          {{- if .provisions }}
          volumeMounts:
            # The directory backend's share: the only place it writes.
            - name: share
              mountPath: /var/lib/reclaimable
            # Credentials of a storage backend, if one needs them: files the
            # provisioner reads, never copied into a volume or a claim.
            - name: credentials
              mountPath: /etc/reclaimable/credentials
              readOnly: true
          {{- end }}
      {{- with $root.Values.nodeSelector }}
      nodeSelector:
        {{- toYaml . | nindent 8 }}
      {{- end }}
      {{- with $root.Values.tolerations }}
      tolerations:
        {{- toYaml . | nindent 8 }}
      {{- end }}
      {{- if $root.Values.affinity }}
      affinity:
        {{- toYaml $root.Values.affinity | nindent 8 }}
      {{- else if .spread }}
      affinity:
        podAntiAffinity:
          preferredDuringSchedulingIgnoredDuringExecution:
            - weight: 100
              podAffinityTerm:
                topologyKey: kubernetes.io/hostname
                labelSelector:
                  matchLabels:
                    app.kubernetes.io/name: reclaimable
                    app.kubernetes.io/component: {{ .component }}
      {{- end }}
      {{- if .provisions }}
      volumes:
        - name: share
          persistentVolumeClaim:
            claimName: reclaimable-share
        - name: credentials
          secret:
            secretName: reclaimable-provisioner-credentials
            optional: true
            defaultMode: 0440
      {{- end }}
{{- end }}
