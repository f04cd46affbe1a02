package deploy_test

import (
	"errors"
	"io"
	"net"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"gopkg.in/yaml.v3"

	"github.com/floe-dev/floe/pipeline"
)

// manifest is one Kubernetes object of deploy/k8s, decoded generically.
type manifest struct {
	file string
	obj  map[string]any
}

// readManifests decodes every document of every YAML file in deploy/k8s
// except the kustomization, and checks each is a complete object.
func readManifests(t *testing.T) (map[string]manifest, []string) {
	t.Helper()
	dir := filepath.Join(deployDir(), "k8s")
	files, err := filepath.Glob(filepath.Join(dir, "*.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	byKind := map[string]manifest{}
	var names []string
	for _, f := range files {
		base := filepath.Base(f)
		if base == "kustomization.yaml" {
			continue
		}
		names = append(names, base)
		fh, err := os.Open(f)
		if err != nil {
			t.Fatal(err)
		}
		dec := yaml.NewDecoder(fh)
		for {
			var obj map[string]any
			if err := dec.Decode(&obj); errors.Is(err, io.EOF) {
				break
			} else if err != nil {
				t.Fatalf("deploy/k8s/%s: %v", base, err)
			}
			if obj == nil {
				continue
			}
			kind := digString(t, obj, "kind")
			for _, k := range []string{"apiVersion", "metadata"} {
				if _, ok := obj[k]; !ok {
					t.Errorf("deploy/k8s/%s: %s without %s", base, kind, k)
				}
			}
			if digString(t, obj, "metadata", "name") == "" {
				t.Errorf("deploy/k8s/%s: %s without metadata.name", base, kind)
			}
			if prev, dup := byKind[kind]; dup {
				t.Fatalf("two %s objects (%s, %s): the test expects one of each kind", kind, prev.file, base)
			}
			byKind[kind] = manifest{file: base, obj: obj}
		}
		fh.Close()
	}
	return byKind, names
}

// selects reports whether every label of selector is in labels.
func selects(t *testing.T, selector, labels map[string]any) bool {
	t.Helper()
	if len(selector) == 0 {
		return false
	}
	for k, v := range selector {
		if labels[k] != v {
			return false
		}
	}
	return true
}

// parseQuantity parses a Kubernetes memory quantity with a binary suffix
// (Ki, Mi, Gi) or none.
func parseQuantity(t *testing.T, q string) int64 {
	t.Helper()
	mult := int64(1)
	for _, u := range []struct {
		s string
		m int64
	}{{"Ki", 1 << 10}, {"Mi", 1 << 20}, {"Gi", 1 << 30}} {
		if v, ok := strings.CutSuffix(q, u.s); ok {
			q, mult = v, u.m
			break
		}
	}
	n, err := strconv.ParseInt(q, 10, 64)
	if err != nil {
		t.Fatalf("memory quantity %q: want a number with Ki, Mi or Gi", q)
	}
	return n * mult
}

var envRef = regexp.MustCompile(`\$\{([A-Za-z_][A-Za-z0-9_]*)(:-[^}]*)?\}`)

// TestKubernetesManifests checks deploy/k8s: every manifest is listed in the
// kustomization; the ConfigMap's floe.yaml loads with floe's loader using
// exactly the environment the Deployment gives the container (secrets from a
// Secret); the probes, the Service and the port agree with metrics.listen;
// the grace period outlasts commit.grace; selectors match the pod template;
// and KEDA scales on the configured group and topic, capped at the topic's
// partition count.
func TestKubernetesManifests(t *testing.T) {
	byKind, files := readManifests(t)
	kust := readYAML(t, filepath.Join(deployDir(), "k8s", "kustomization.yaml"))
	listed := digStrings(t, kust, "resources")
	slices.Sort(listed)
	slices.Sort(files)
	if !slices.Equal(listed, files) {
		t.Errorf("kustomization.yaml resources %v, files in deploy/k8s %v", listed, files)
	}
	for _, kind := range []string{"ConfigMap", "Deployment", "Service", "PodDisruptionBudget", "ScaledObject"} {
		if _, ok := byKind[kind]; !ok {
			t.Errorf("deploy/k8s has no %s", kind)
		}
	}
	if t.Failed() {
		t.FailNow()
	}
	deploy := byKind["Deployment"].obj
	cm := byKind["ConfigMap"].obj
	pod := digMap(t, deploy, "spec", "template")
	podLabels := digMap(t, pod, "metadata", "labels")
	if !selects(t, digMap(t, deploy, "spec", "selector", "matchLabels"), podLabels) {
		t.Error("the Deployment's selector does not match its pod template's labels")
	}
	containers := digList(t, pod, "spec", "containers")
	if len(containers) != 1 {
		t.Fatalf("the pod has %d containers, want 1", len(containers))
	}
	c := containers[0]

	// The configuration: --config names the ConfigMap's key through the
	// volume mount.
	cargs := digStrings(t, c, "args")
	if len(cargs) == 0 || cargs[0] != "run" {
		t.Fatalf("container args %q, want run …", cargs)
	}
	cfgPath := flagValue(cargs, "--config")
	cmName := digString(t, cm, "metadata", "name")
	var cfgVolume string
	for i := range digList(t, pod, "spec", "volumes") {
		v := dig(t, pod, "spec", "volumes", strconv.Itoa(i))
		if has(v, "configMap") && digString(t, v, "configMap", "name") == cmName {
			cfgVolume = digString(t, v, "name")
		}
	}
	var mountPath string
	for i := range digList(t, c, "volumeMounts") {
		m := dig(t, c, "volumeMounts", strconv.Itoa(i))
		if digString(t, m, "name") == cfgVolume {
			mountPath = digString(t, m, "mountPath")
		}
	}
	if cfgVolume == "" || mountPath == "" || filepath.Dir(cfgPath) != mountPath {
		t.Fatalf("--config %s is not in the mount (%q) of the ConfigMap %s's volume (%q)", cfgPath, mountPath, cmName, cfgVolume)
	}
	key := filepath.Base(cfgPath)
	content := digString(t, cm, "data", key)

	// The container's environment: literal values and Secret references.
	// Floe loads the configuration with exactly these variables set (Secret
	// values stand in as placeholders), so a ${NAME} the Deployment does not
	// provide fails here as it would in the pod.
	env := map[string]string{}
	fromSecret := map[string]bool{}
	if has(c, "env") {
		for i := range digList(t, c, "env") {
			e := dig(t, c, "env", strconv.Itoa(i))
			name := digString(t, e, "name")
			switch {
			case has(e, "valueFrom", "secretKeyRef"):
				env[name] = "from-secret-" + digString(t, e, "valueFrom", "secretKeyRef", "name") + "-" + digString(t, e, "valueFrom", "secretKeyRef", "key")
				fromSecret[name] = true
			case has(e, "value"):
				env[name] = digString(t, e, "value")
			default:
				t.Errorf("container env %s has neither value nor valueFrom.secretKeyRef", name)
			}
		}
	}
	var unset []string
	for _, m := range envRef.FindAllStringSubmatch(content, -1) {
		if _, ok := env[m[1]]; !ok {
			unset = append(unset, m[1])
		}
	}
	file := filepath.Join(t.TempDir(), key)
	if err := os.WriteFile(file, []byte(content), 0o600); err != nil {
		t.Fatal(err)
	}
	cfg := loadFloeConfig(t, file, env, unset...)

	// Passwords: the catalog credential and the enrichment auth header come
	// from the Secret, never from the ConfigMap.
	var raw struct {
		Table struct {
			Catalog map[string]string `yaml:"catalog"`
		} `yaml:"table"`
		Enrich struct {
			AuthHeader string `yaml:"auth_header"`
		} `yaml:"enrich"`
	}
	if err := yaml.Unmarshal([]byte(content), &raw); err != nil {
		t.Fatal(err)
	}
	secrets := map[string]string{"table.catalog.credential": raw.Table.Catalog["credential"], "enrich.auth_header": raw.Enrich.AuthHeader}
	for k, v := range raw.Table.Catalog {
		if strings.Contains(k, "token") || strings.Contains(k, "password") || strings.Contains(k, "secret") {
			secrets["table.catalog."+k] = v
		}
	}
	for key, v := range secrets {
		if v == "" {
			continue
		}
		refs := envRef.FindAllStringSubmatch(v, -1)
		if len(refs) == 0 {
			t.Errorf("ConfigMap floe.yaml: %s is a literal; take it from the environment (${NAME}) and the Secret", key)
		}
		for _, r := range refs {
			if !fromSecret[r[1]] {
				t.Errorf("ConfigMap floe.yaml: %s uses ${%s}, which the Deployment does not take from a Secret", key, r[1])
			}
		}
	}
	if raw.Enrich.AuthHeader == "" || raw.Table.Catalog["credential"] == "" {
		t.Error("the ConfigMap's floe.yaml sets no enrich.auth_header or table.catalog.credential: the Secret wiring is untested")
	}

	// Metrics: listen on the pod's address, on the container's metrics
	// port, which the probes and the Service use.
	host, port := hostPort(t, cfg.Metrics.Listen)
	if ip := net.ParseIP(host); host == "localhost" || (ip != nil && ip.IsLoopback()) {
		t.Errorf("metrics.listen %s is loopback: the kubelet's probes and Prometheus could not reach it", cfg.Metrics.Listen)
	}
	ports := map[string]int{} // name → containerPort
	for i := range digList(t, c, "ports") {
		p := dig(t, c, "ports", strconv.Itoa(i))
		n, err := strconv.Atoi(digString(t, p, "containerPort"))
		if err != nil {
			t.Fatal(err)
		}
		name := ""
		if has(p, "name") {
			name = digString(t, p, "name")
		}
		ports[name] = n
	}
	resolve := func(p string) int {
		if n, err := strconv.Atoi(p); err == nil {
			return n
		}
		n, ok := ports[p]
		if !ok {
			t.Errorf("port %q names no container port", p)
		}
		return n
	}
	if !slices.Contains(mapValues(ports), port) {
		t.Errorf("no container port is metrics.listen's %d (ports %v)", port, ports)
	}
	for probe, path := range map[string]string{"livenessProbe": "/livez", "readinessProbe": "/readyz"} {
		if got := digString(t, c, probe, "httpGet", "path"); got != path {
			t.Errorf("%s path %s, want %s", probe, got, path)
		}
		if got := resolve(digString(t, c, probe, "httpGet", "port")); got != port {
			t.Errorf("%s port %d, want metrics.listen's %d", probe, got, port)
		}
	}
	svc := byKind["Service"].obj
	if !selects(t, digMap(t, svc, "spec", "selector"), podLabels) {
		t.Error("the Service's selector does not match the pod template's labels")
	}
	if got := resolve(digString(t, svc, "spec", "ports", "0", "targetPort")); got != port {
		t.Errorf("the Service targets port %d, want metrics.listen's %d", got, port)
	}

	// Shutdown: the kubelet's SIGKILL must come after floe's final flush.
	grace, err := strconv.Atoi(digString(t, pod, "spec", "terminationGracePeriodSeconds"))
	if err != nil {
		t.Fatal(err)
	}
	if time.Duration(grace)*time.Second <= cfg.Commit.Grace.D()+pipeline.StopOverhead {
		t.Errorf("terminationGracePeriodSeconds %d is not longer than commit.grace %s + %s (pipeline.StopOverhead)",
			grace, cfg.Commit.Grace.D(), pipeline.StopOverhead)
	}

	// Resources and security.
	for _, k := range []string{"requests", "limits"} {
		if !has(c, "resources", k, "memory") {
			t.Errorf("the container has no resources.%s.memory", k)
		}
	}
	if has(c, "resources", "limits", "memory") {
		limit := parseQuantity(t, digString(t, c, "resources", "limits", "memory"))
		if cfg.MemoryLimit <= 0 || int64(cfg.MemoryLimit) >= limit {
			t.Errorf("memory_limit %d is not set below the container's memory limit %d: the Go runtime would not collect before the OOM kill", cfg.MemoryLimit, limit)
		}
	}
	if digString(t, pod, "spec", "securityContext", "runAsNonRoot") != "true" {
		t.Error("the pod does not set securityContext.runAsNonRoot: true")
	}
	uid := digString(t, pod, "spec", "securityContext", "runAsUser")
	if uid == "0" {
		t.Error("the pod runs as uid 0")
	}
	stages := parseDockerfile(t)
	users := stages[len(stages)-1].instruction("user")
	if len(users) > 0 {
		if imageUID, _, _ := strings.Cut(args(users[len(users)-1])[0], ":"); imageUID != uid {
			t.Errorf("the pod runs as uid %s, the image's USER is %s", uid, imageUID)
		}
	}
	for k, want := range map[string]string{"readOnlyRootFilesystem": "true", "allowPrivilegeEscalation": "false"} {
		if got := digString(t, c, "securityContext", k); got != want {
			t.Errorf("container securityContext.%s %s, want %s", k, got, want)
		}
	}

	// Disruptions: one member at a time.
	pdb := byKind["PodDisruptionBudget"].obj
	if got := digString(t, pdb, "spec", "maxUnavailable"); got != "1" {
		t.Errorf("PodDisruptionBudget maxUnavailable %s, want 1", got)
	}
	if !selects(t, digMap(t, pdb, "spec", "selector", "matchLabels"), podLabels) {
		t.Error("the PodDisruptionBudget's selector does not match the pod template's labels")
	}

	// KEDA: the consumer group's lag on floe's topic, up to one member per
	// partition.
	so := byKind["ScaledObject"].obj
	if digString(t, so, "spec", "scaleTargetRef", "name") != digString(t, deploy, "metadata", "name") ||
		(has(so, "spec", "scaleTargetRef", "kind") && digString(t, so, "spec", "scaleTargetRef", "kind") != "Deployment") {
		t.Error("the ScaledObject does not target the Deployment")
	}
	partitions, err := strconv.Atoi(digString(t, so, "metadata", "annotations", "floe.dev/topic-partitions"))
	if err != nil || partitions < 1 {
		t.Fatalf("ScaledObject annotation floe.dev/topic-partitions: want the topic's partition count (%v)", err)
	}
	maxReplicas, _ := strconv.Atoi(digString(t, so, "spec", "maxReplicaCount"))
	minReplicas, _ := strconv.Atoi(digString(t, so, "spec", "minReplicaCount"))
	if maxReplicas != partitions {
		t.Errorf("maxReplicaCount %d, want the topic's %d partitions", maxReplicas, partitions)
	}
	if minReplicas < 1 || minReplicas > maxReplicas {
		t.Errorf("minReplicaCount %d, want 1..%d", minReplicas, maxReplicas)
	}
	if replicas, _ := strconv.Atoi(digString(t, deploy, "spec", "replicas")); replicas < 1 || replicas > partitions {
		t.Errorf("Deployment replicas %d, want 1..%d (the partition count)", replicas, partitions)
	}
	triggers := digList(t, so, "spec", "triggers")
	if len(triggers) != 1 || digString(t, triggers[0], "type") != "kafka" {
		t.Fatalf("ScaledObject triggers %v, want one kafka trigger", triggers)
	}
	meta := digMap(t, triggers[0], "metadata")
	for k, want := range map[string]string{
		"topic":             cfg.Kafka.Topic,
		"consumerGroup":     cfg.Kafka.Group,
		"bootstrapServers":  strings.Join(cfg.Kafka.Brokers, ","),
		"offsetResetPolicy": cfg.Kafka.StartOffset,
	} {
		if got := digString(t, meta, k); got != want {
			t.Errorf("kafka trigger %s %q, floe's configuration says %q", k, got, want)
		}
	}
	if lag, err := strconv.Atoi(digString(t, meta, "lagThreshold")); err != nil || lag <= 0 {
		t.Errorf("kafka trigger lagThreshold %q, want a positive number of records", digString(t, meta, "lagThreshold"))
	}
	if has(meta, "allowIdleConsumers") && digString(t, meta, "allowIdleConsumers") != "false" {
		t.Error("kafka trigger allowIdleConsumers: more members than partitions would idle")
	}
}

func mapValues(m map[string]int) []int {
	var out []int
	for _, v := range m {
		out = append(out, v)
	}
	return out
}
