// Tests of the deployment artefacts in deploy/: the container image
// (Dockerfile), the compose file and the configuration it mounts. There is no
// container engine here, so the tests check what can be checked without one:
// the files parse, their stages, services and dependencies are wired
// consistently, the configuration they mount loads with floe's own loader,
// and the image's build command really builds floe.
package deploy_test

import (
	"bytes"
	"fmt"
	"net"
	"net/url"
	"os"
	"os/exec"
	"path"
	"path/filepath"
	"runtime"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/moby/buildkit/frontend/dockerfile/parser"
	"github.com/moby/buildkit/frontend/dockerfile/shell"
	"gopkg.in/yaml.v3"

	"github.com/floe-dev/floe/lakehouse/hdfsio"
	"github.com/floe-dev/floe/pipeline"
)

// deployDir is the absolute path of deploy/, repoRoot that of the module.
func deployDir() string {
	_, file, _, _ := runtime.Caller(0)
	return filepath.Dir(file)
}

func repoRoot() string { return filepath.Dir(deployDir()) }

// loadFloeConfig loads a floe configuration file the way `floe run` does
// (LoadConfig, then Finish), with env set for the ${...} references and
// unset for the unset names, so their ${NAME:-default}s apply.
func loadFloeConfig(t *testing.T, file string, env map[string]string, unset ...string) pipeline.Config {
	t.Helper()
	for _, k := range unset {
		t.Setenv(k, "") // restores the old value after the test
		os.Unsetenv(k)
	}
	for k, v := range env {
		t.Setenv(k, v)
	}
	cfg, err := pipeline.LoadConfig(file)
	if err != nil {
		t.Fatalf("floe's loader rejects %s: %v", file, err)
	}
	if err := cfg.Finish(); err != nil {
		t.Fatalf("floe's validation rejects %s: %v", file, err)
	}
	return cfg
}

// hostPort splits addr and parses its port, failing t otherwise.
func hostPort(t *testing.T, addr string) (string, int) {
	t.Helper()
	host, port, err := net.SplitHostPort(addr)
	if err != nil {
		t.Fatalf("address %q: %v", addr, err)
	}
	p, err := strconv.Atoi(port)
	if err != nil {
		t.Fatalf("address %q: port %q is not a number", addr, port)
	}
	return host, p
}

// urlHostPort returns the host and port of a URL, failing t if it has no
// explicit port.
func urlHostPort(t *testing.T, raw string) (string, int) {
	t.Helper()
	u, err := url.Parse(raw)
	if err != nil {
		t.Fatalf("url %q: %v", raw, err)
	}
	return hostPort(t, u.Host)
}

// readYAML decodes one YAML document from file into a generic value.
func readYAML(t *testing.T, file string) map[string]any {
	t.Helper()
	raw, err := os.ReadFile(file)
	if err != nil {
		t.Fatal(err)
	}
	var doc map[string]any
	if err := yaml.Unmarshal(raw, &doc); err != nil {
		t.Fatalf("%s: %v", file, err)
	}
	if doc == nil {
		t.Fatalf("%s is empty", file)
	}
	return doc
}

// dig walks a decoded YAML or JSON value: map keys by name, sequence items by
// index ("0"). It fails t naming the path when a step is missing.
func dig(t *testing.T, v any, keys ...string) any {
	t.Helper()
	for i, k := range keys {
		switch c := v.(type) {
		case map[string]any:
			next, ok := c[k]
			if !ok {
				t.Fatalf("missing %s", strings.Join(keys[:i+1], "."))
			}
			v = next
		case []any:
			n, err := strconv.Atoi(k)
			if err != nil || n < 0 || n >= len(c) {
				t.Fatalf("missing %s (a list of %d)", strings.Join(keys[:i+1], "."), len(c))
			}
			v = c[n]
		default:
			t.Fatalf("%s is a %T, not a map or list", strings.Join(keys[:i], "."), v)
		}
	}
	return v
}

// has reports whether dig would find the path.
func has(v any, keys ...string) bool {
	for _, k := range keys {
		m, ok := v.(map[string]any)
		if !ok {
			return false
		}
		if v, ok = m[k]; !ok {
			return false
		}
	}
	return true
}

// digString is dig for a scalar, rendered as a string (YAML ints and bools
// included, as Kubernetes and compose accept both for many fields).
func digString(t *testing.T, v any, keys ...string) string {
	t.Helper()
	switch s := dig(t, v, keys...).(type) {
	case string:
		return s
	case int, int64, float64, bool:
		return fmt.Sprint(s)
	default:
		t.Fatalf("%s is a %T, not a scalar", strings.Join(keys, "."), s)
		return ""
	}
}

func digMap(t *testing.T, v any, keys ...string) map[string]any {
	t.Helper()
	m, ok := dig(t, v, keys...).(map[string]any)
	if !ok {
		t.Fatalf("%s is not a map", strings.Join(keys, "."))
	}
	return m
}

func digList(t *testing.T, v any, keys ...string) []any {
	t.Helper()
	l, ok := dig(t, v, keys...).([]any)
	if !ok {
		t.Fatalf("%s is not a list", strings.Join(keys, "."))
	}
	return l
}

// strings of a YAML list of scalars.
func digStrings(t *testing.T, v any, keys ...string) []string {
	t.Helper()
	var out []string
	for i := range digList(t, v, keys...) {
		out = append(out, digString(t, v, append(keys, strconv.Itoa(i))...))
	}
	return out
}

// stage is one FROM … of a Dockerfile with its instructions.
type stage struct {
	name  string // the AS name, or the stage's index
	image string
	nodes []*parser.Node
}

// instruction returns the nodes of one kind (lower-case: "run", "user").
func (s stage) instruction(kind string) []*parser.Node {
	var out []*parser.Node
	for _, n := range s.nodes {
		if strings.EqualFold(n.Value, kind) {
			out = append(out, n)
		}
	}
	return out
}

// args returns an instruction's arguments: the JSON array's elements, or the
// shell form's words.
func args(n *parser.Node) []string {
	var out []string
	for a := n.Next; a != nil; a = a.Next {
		out = append(out, a.Value)
	}
	return out
}

// parseDockerfile parses deploy/Dockerfile with BuildKit's own parser and
// splits it into stages.
func parseDockerfile(t *testing.T) []stage {
	t.Helper()
	raw, err := os.ReadFile(filepath.Join(deployDir(), "Dockerfile"))
	if err != nil {
		t.Fatal(err)
	}
	res, err := parser.Parse(bytes.NewReader(raw))
	if err != nil {
		t.Fatalf("parsing deploy/Dockerfile: %v", err)
	}
	for _, w := range res.Warnings {
		t.Errorf("deploy/Dockerfile line %v: %s", w.Location, w.Short)
	}
	var stages []stage
	for _, n := range res.AST.Children {
		if strings.EqualFold(n.Value, "from") {
			a := args(n)
			st := stage{name: strconv.Itoa(len(stages)), image: a[0]}
			if len(a) == 3 && strings.EqualFold(a[1], "as") {
				st.name = a[2]
			}
			stages = append(stages, st)
			continue
		}
		if len(stages) == 0 {
			if !strings.EqualFold(n.Value, "arg") {
				t.Errorf("deploy/Dockerfile line %d: %s before the first FROM", n.StartLine, n.Value)
			}
			continue
		}
		stages[len(stages)-1].nodes = append(stages[len(stages)-1].nodes, n)
	}
	return stages
}

// goBuild is the `go build` of the image's build stage, split into words.
type goBuild struct {
	env    []string // NAME=value assignments before `go`
	flags  []string // everything between `build` and the package, without -o
	output string   // the -o value
	pkg    string
}

// findGoBuild finds the RUN of st that runs `go build` and parses it with
// BuildKit's shell lexer (quotes as the image build sees them).
func findGoBuild(t *testing.T, st stage) goBuild {
	t.Helper()
	lex := shell.NewLex('\\')
	for _, n := range st.instruction("run") {
		if n.Attributes["json"] || n.Next == nil {
			continue
		}
		words, err := lex.ProcessWords(n.Next.Value, shell.EnvsFromSlice(nil))
		if err != nil {
			t.Fatalf("deploy/Dockerfile line %d: %v", n.StartLine, err)
		}
		i := slices.Index(words, "go")
		if i < 0 || i+1 >= len(words) || words[i+1] != "build" {
			continue
		}
		if slices.ContainsFunc(words, func(w string) bool { return w == "&&" || w == ";" || w == "|" }) {
			t.Fatalf("deploy/Dockerfile line %d: keep the go build alone in its RUN so it can be checked: %q", n.StartLine, n.Next.Value)
		}
		b := goBuild{env: words[:i]}
		for _, e := range b.env {
			if !strings.Contains(e, "=") {
				t.Fatalf("deploy/Dockerfile line %d: %q before go build is not an assignment", n.StartLine, e)
			}
		}
		rest := words[i+2:]
		for j := 0; j < len(rest); j++ {
			switch w := rest[j]; {
			case w == "-o" && j+1 < len(rest):
				b.output = rest[j+1]
				j++
			case strings.HasPrefix(w, "-"):
				b.flags = append(b.flags, w)
			default:
				if b.pkg != "" {
					t.Fatalf("deploy/Dockerfile line %d: go build of more than one package (%s, %s)", n.StartLine, b.pkg, w)
				}
				b.pkg = w
			}
		}
		return b
	}
	t.Fatalf("deploy/Dockerfile: stage %s has no RUN … go build", st.name)
	return goBuild{}
}

var (
	buildOnce sync.Once
	buildDir  string // removed by TestMain
	builtBin  string
	buildErr  error
	buildTook time.Duration
)

func TestMain(m *testing.M) {
	code := m.Run()
	if buildDir != "" {
		os.RemoveAll(buildDir)
	}
	os.Exit(code)
}

// floeBinary builds the package the image builds, once per test binary,
// and returns the binary's path; the metrics test runs it. It is built with
// the test's own toolchain settings rather than the image's CGO_ENABLED=0
// and -trimpath, so that it reuses the build cache of the rest of the suite
// (the image's settings would recompile every dependency, minutes on two
// cores); TestDockerfile checks that those settings resolve every package.
func floeBinary(t *testing.T) string {
	t.Helper()
	stages := parseDockerfile(t)
	b := findGoBuild(t, stages[0])
	buildOnce.Do(func() {
		buildDir, buildErr = os.MkdirTemp("", "floe-image-build")
		if buildErr != nil {
			return
		}
		builtBin = filepath.Join(buildDir, "floe")
		cmd := exec.Command("go", "build", "-o", builtBin, b.pkg)
		cmd.Dir = repoRoot()
		start := time.Now()
		out, err := cmd.CombinedOutput()
		buildTook = time.Since(start)
		if err != nil {
			buildErr = fmt.Errorf("go build %s: %v\n%s", b.pkg, err, out)
		}
	})
	if buildErr != nil {
		t.Fatal(buildErr)
	}
	return builtBin
}

// checkBuildResolves runs `go list -deps` on the image's package with the
// image's environment and flags: every package must resolve, so a
// dependency that needs cgo (excluded by CGO_ENABLED=0) fails here rather
// than in the image build.
func checkBuildResolves(t *testing.T, b goBuild) {
	t.Helper()
	cmd := exec.Command("go", append(append([]string{"list", "-e", "-deps", "-f", "{{.ImportPath}}\t{{if .Error}}{{.Error}}{{end}}{{range .DepsErrors}}{{.}} {{end}}"}, b.flags...), b.pkg)...)
	cmd.Dir = repoRoot()
	cmd.Env = append(os.Environ(), b.env...)
	out, err := cmd.Output()
	if err != nil {
		t.Fatalf("%s go list %s: %v", strings.Join(b.env, " "), b.pkg, err)
	}
	var n int
	for line := range strings.Lines(string(out)) {
		n++
		if pkg, problem, _ := strings.Cut(strings.TrimSpace(line), "\t"); problem != "" {
			t.Errorf("with the image's build settings (%s %s), package %s does not build: %s",
				strings.Join(b.env, " "), strings.Join(b.flags, " "), pkg, problem)
		}
	}
	if n < 100 {
		t.Errorf("go list -deps %s found only %d packages", b.pkg, n)
	}
}

// TestDockerfile checks the image: a build stage and a runtime stage, the
// build command builds ./cmd/floe (every package resolving with its
// environment and flags, and the package builds and runs), the runtime runs
// floe as a non-root user with the configuration at /etc/floe/floe.yaml,
// and exposes the metrics port that configuration listens on.
// TestDockerfileDownloadsModules replays the build stage up to its `go mod
// download` in an empty directory, with only what the COPYs before it put
// there (this machine's module cache standing for the image's cache mount):
// go.mod's replace of kafka-go with the copy in third_party made the
// download fail, and the image could not be built.
func TestDockerfileDownloadsModules(t *testing.T) {
	src := t.TempDir()
	for _, n := range parseDockerfile(t)[0].nodes {
		a := args(n)
		switch strings.ToLower(n.Value) {
		case "copy":
			if len(n.Flags) > 0 || len(a) < 2 {
				continue
			}
			dest := filepath.Join(src, a[len(a)-1])
			for _, f := range a[:len(a)-1] {
				if f == "." {
					t.Fatalf("line %d: COPY . before go mod download", n.StartLine)
				}
				raw, err := os.ReadFile(filepath.Join(repoRoot(), f))
				if err != nil {
					t.Fatal(err)
				}
				to := dest
				if strings.HasSuffix(a[len(a)-1], "/") {
					to = filepath.Join(dest, filepath.Base(f))
				}
				if err := os.MkdirAll(filepath.Dir(to), 0o755); err != nil {
					t.Fatal(err)
				}
				if err := os.WriteFile(to, raw, 0o644); err != nil {
					t.Fatal(err)
				}
			}
		case "run":
			if !strings.Contains(strings.Join(a, " "), "go mod download") {
				continue
			}
			cmd := exec.Command("go", "mod", "download")
			cmd.Dir = src
			cmd.Env = append(os.Environ(), "GOPROXY=off", "GOFLAGS=-mod=mod")
			if out, err := cmd.CombinedOutput(); err != nil {
				t.Fatalf("line %d: go mod download fails with what the COPYs before it put in /src (%v):\n%s", n.StartLine, err, out)
			}
			return
		}
	}
	t.Fatal("no RUN go mod download in the build stage")
}

func TestDockerfile(t *testing.T) {
	stages := parseDockerfile(t)
	if len(stages) < 2 {
		t.Fatalf("deploy/Dockerfile has %d stage(s), want a build stage and a runtime stage", len(stages))
	}
	names := map[string]bool{}
	for _, st := range stages {
		names[st.name] = true
	}
	build, final := stages[0], stages[len(stages)-1]
	if !strings.HasPrefix(build.image, "golang:") {
		t.Errorf("build stage FROM %s, want a golang image", build.image)
	}

	// The build: ./cmd/floe, a static binary (the runtime image has no Go
	// toolchain and may have a different libc), with the module cache mounted.
	b := findGoBuild(t, build)
	if b.pkg != "./cmd/floe" {
		t.Errorf("the build stage builds %q, want ./cmd/floe", b.pkg)
	}
	if !slices.Contains(b.env, "CGO_ENABLED=0") {
		t.Errorf("the build stage's go build runs without CGO_ENABLED=0 (env %v): the binary would depend on the build image's libc", b.env)
	}
	var mountsModCache bool
	for _, n := range build.instruction("run") {
		for _, f := range n.Flags {
			mountsModCache = mountsModCache || (strings.HasPrefix(f, "--mount=type=cache") && strings.Contains(f, "target=/go/pkg/mod"))
		}
	}
	if !mountsModCache {
		t.Error("no RUN of the build stage mounts a cache at /go/pkg/mod")
	}

	// The runtime stage copies the binary out of the build stage.
	var binary string
	for _, n := range final.instruction("copy") {
		from := ""
		for _, f := range n.Flags {
			if v, ok := strings.CutPrefix(f, "--from="); ok {
				from = v
			}
		}
		a := args(n)
		if from != "" {
			if !names[from] {
				t.Errorf("line %d: COPY --from=%s names no stage", n.StartLine, from)
			}
			if slices.Contains(a[:len(a)-1], b.output) {
				binary = a[len(a)-1]
			}
		}
	}
	if binary == "" {
		t.Fatalf("the final stage copies no %s from the build stage", b.output)
	}

	users := final.instruction("user")
	if len(users) == 0 {
		t.Fatal("the final stage has no USER: floe would run as root")
	}
	user := args(users[len(users)-1])[0]
	if name, _, _ := strings.Cut(user, ":"); name == "root" || name == "0" {
		t.Errorf("the final stage runs as %q, want a non-root user", user)
	}

	entry := final.instruction("entrypoint")
	if len(entry) != 1 || !entry[0].Attributes["json"] {
		t.Fatal("the final stage needs one ENTRYPOINT in exec (JSON) form, so floe is PID 1 and receives SIGTERM")
	}
	if ep := args(entry[0]); len(ep) != 1 || ep[0] != binary || path.Base(ep[0]) != "floe" {
		t.Errorf("ENTRYPOINT %q, want [%q] (the floe binary copied from the build stage)", ep, binary)
	}

	// The default command runs floe on the configuration the image carries,
	// and that configuration loads.
	cmds := final.instruction("cmd")
	if len(cmds) != 1 {
		t.Fatalf("the final stage has %d CMD, want 1", len(cmds))
	}
	cmd := args(cmds[0])
	if len(cmd) == 0 || cmd[0] != "run" {
		t.Fatalf("CMD %q, want floe run …", cmd)
	}
	cfgPath := flagValue(cmd, "--config")
	if cfgPath != "/etc/floe/floe.yaml" {
		t.Errorf("CMD %q reads --config %q, want /etc/floe/floe.yaml", cmd, cfgPath)
	}
	var src string
	for _, n := range final.instruction("copy") {
		if a := args(n); a[len(a)-1] == cfgPath {
			src = a[0]
		}
	}
	if src == "" {
		t.Fatalf("the final stage copies nothing to %s", cfgPath)
	}
	cfg := loadFloeConfig(t, filepath.Join(repoRoot(), src), nil, "KAFKA_BROKERS", "CATALOG_URI", "LOOKUP_URL")
	host, port := hostPort(t, cfg.Metrics.Listen)
	if ip := net.ParseIP(host); host == "localhost" || (ip != nil && ip.IsLoopback()) {
		t.Errorf("%s: metrics.listen %s is loopback: nothing outside the container could scrape or probe it", src, cfg.Metrics.Listen)
	}
	var exposed []string
	for _, n := range final.instruction("expose") {
		exposed = append(exposed, args(n)...)
	}
	if !slices.Contains(exposed, strconv.Itoa(port)) && !slices.Contains(exposed, fmt.Sprintf("%d/tcp", port)) {
		t.Errorf("EXPOSE %v lacks the metrics port %d of %s", exposed, port, src)
	}

	// Ignore file: BuildKit reads <Dockerfile>.dockerignore beside it.
	ignore, err := os.ReadFile(filepath.Join(deployDir(), "Dockerfile.dockerignore"))
	if err != nil {
		t.Fatal(err)
	}
	if !slices.Contains(strings.Fields(string(ignore)), ".git") {
		t.Error("deploy/Dockerfile.dockerignore does not exclude .git from the build context")
	}

	checkBuildResolves(t, b)
	bin := floeBinary(t)
	t.Logf("built %s in %s", b.pkg, buildTook.Round(time.Millisecond))
	out, err := exec.Command(bin, "run", "--help").CombinedOutput()
	if err != nil || !bytes.Contains(out, []byte("--until-caught-up")) {
		t.Errorf("the built binary's `floe run --help` failed (%v):\n%s", err, out)
	}
}

// flagValue returns the value of --name VALUE or --name=VALUE in words.
func flagValue(words []string, name string) string {
	for i, w := range words {
		if w == name && i+1 < len(words) {
			return words[i+1]
		}
		if v, ok := strings.CutPrefix(w, name+"="); ok {
			return v
		}
	}
	return ""
}

// TestCompose checks deploy/compose.yaml: the services are there with the
// expected images, every long-running one has a healthcheck, every
// dependency waits on a condition its target can meet, and floe's mounted
// configuration loads and points at the services by their compose names and
// ports.
func TestCompose(t *testing.T) {
	doc := readYAML(t, filepath.Join(deployDir(), "compose.yaml"))
	services := map[string]map[string]any{}
	for name, s := range digMap(t, doc, "services") {
		m, ok := s.(map[string]any)
		if !ok {
			t.Fatalf("services.%s is not a map", name)
		}
		services[name] = m
	}
	for name, prefix := range map[string]string{
		"kafka": "apache/kafka:", "namenode": "apache/hadoop:", "datanode": "apache/hadoop:",
		"iceberg-rest": "apache/iceberg-rest-fixture:", "enrichd": "", "floe": "",
	} {
		s, ok := services[name]
		if !ok {
			t.Errorf("services.%s is missing", name)
			continue
		}
		if img := digString(t, s, "image"); !strings.HasPrefix(img, prefix) {
			t.Errorf("services.%s.image %s, want %s…", name, img, prefix)
		}
	}
	if t.Failed() {
		t.FailNow()
	}

	// Healthchecks and start-up order. One-shot services (restart: "no")
	// are waited for with service_completed_successfully, the others with
	// service_healthy, which needs a healthcheck.
	oneShot := func(s map[string]any) bool { return has(s, "restart") && digString(t, s, "restart") == "no" }
	for name, s := range services {
		if !oneShot(s) && len(digList(t, s, "healthcheck", "test")) < 2 {
			t.Errorf("services.%s has no healthcheck test", name)
		}
		if !has(s, "depends_on") {
			continue
		}
		for dep := range digMap(t, s, "depends_on") {
			target, ok := services[dep]
			if !ok {
				t.Errorf("services.%s depends on %s, which is not a service", name, dep)
				continue
			}
			want := "service_healthy"
			if oneShot(target) {
				want = "service_completed_successfully"
			}
			if got := digString(t, s, "depends_on", dep, "condition"); got != want {
				t.Errorf("services.%s.depends_on.%s.condition %s, want %s", name, dep, got, want)
			}
		}
	}
	// floe must (transitively) wait for Kafka's topics, the catalog, HDFS
	// and the enrichment server.
	waits := map[string]bool{}
	var walk func(string)
	walk = func(name string) {
		if !has(services[name], "depends_on") {
			return
		}
		for dep := range digMap(t, services[name], "depends_on") {
			if !waits[dep] {
				waits[dep] = true
				walk(dep)
			}
		}
	}
	walk("floe")
	for _, dep := range []string{"kafka", "namenode", "datanode", "iceberg-rest", "enrichd"} {
		if !waits[dep] {
			t.Errorf("floe starts without waiting for %s", dep)
		}
	}

	// Kafka: KRaft, no ZooKeeper.
	kenv := digMap(t, services["kafka"], "environment")
	if roles := digString(t, kenv, "KAFKA_PROCESS_ROLES"); !strings.Contains(roles, "controller") {
		t.Errorf("kafka runs with KAFKA_PROCESS_ROLES %q, want KRaft (broker,controller)", roles)
	}
	for k := range kenv {
		if strings.Contains(k, "ZOOKEEPER") {
			t.Errorf("kafka sets %s: the image runs KRaft", k)
		}
	}
	advertised := digString(t, kenv, "KAFKA_ADVERTISED_LISTENERS")

	// floe's configuration: mounted from the repository, and it loads.
	floe := services["floe"]
	cmd := digStrings(t, floe, "command")
	if len(cmd) == 0 || cmd[0] != "run" {
		t.Fatalf("services.floe.command %q, want run …", cmd)
	}
	cfgPath := flagValue(cmd, "--config")
	var src string
	for _, v := range digStrings(t, floe, "volumes") {
		parts := strings.Split(v, ":")
		if len(parts) >= 2 && parts[1] == cfgPath {
			src = filepath.Join(deployDir(), parts[0])
		}
	}
	if src == "" {
		t.Fatalf("services.floe mounts nothing at --config %s", cfgPath)
	}
	if _, err := os.Stat(src); err != nil {
		t.Fatalf("services.floe mounts %s, which is not in the repository: %v", src, err)
	}
	cfg := loadFloeConfig(t, src, nil, "KAFKA_BROKERS", "CATALOG_URI", "LOOKUP_URL")

	for _, b := range cfg.Kafka.Brokers {
		if !strings.Contains(advertised, "://"+b) {
			t.Errorf("floe's broker %s is not among kafka's advertised listeners %s", b, advertised)
		}
	}
	init := strings.Join(digStrings(t, services["kafka-init"], "command"), " ")
	for _, topic := range []string{cfg.Kafka.Topic, cfg.Kafka.DLQTopic} {
		if !strings.Contains(init, "--topic "+topic+" ") {
			t.Errorf("kafka-init does not create topic %s (floe's kafka.topic / dlq_topic)", topic)
		}
	}
	// verify tells a dead-lettered offset from a lost one only while its
	// letter is held: the dead-letter topic keeps them for ever.
	if at := strings.Index(init, "--topic "+cfg.Kafka.DLQTopic+" "); at >= 0 {
		dlqCreate, _, _ := strings.Cut(init[at:], "&&")
		if !strings.Contains(dlqCreate, "--config retention.ms=-1") {
			t.Errorf("kafka-init creates %s without --config retention.ms=-1: %s", cfg.Kafka.DLQTopic, dlqCreate)
		}
	}

	if cfg.Table.Catalog["type"] != "rest" {
		t.Errorf("floe's table.catalog.type %q, want rest (the iceberg-rest service)", cfg.Table.Catalog["type"])
	}
	if host, port := urlHostPort(t, cfg.Table.Catalog["uri"]); host != "iceberg-rest" || !publishes(t, services["iceberg-rest"], port) {
		t.Errorf("floe's catalog uri %s does not reach the iceberg-rest service on a port it serves", cfg.Table.Catalog["uri"])
	}
	renv := digMap(t, services["iceberg-rest"], "environment")
	warehouse := digString(t, renv, "CATALOG_WAREHOUSE")
	henv := digMap(t, services["namenode"], "environment")
	rpc := digString(t, henv, "HDFS-SITE.XML_dfs.namenode.rpc-address")
	if !strings.HasPrefix(warehouse, "hdfs://"+rpc+"/") {
		t.Errorf("CATALOG_WAREHOUSE %s is not on the namenode's HDFS (rpc-address %s)", warehouse, rpc)
	}
	if !strings.Contains(strings.Join(digStrings(t, services["hdfs-init"], "command"), " "), strings.TrimPrefix(warehouse, "hdfs://"+rpc)) {
		t.Errorf("hdfs-init does not create the warehouse directory of %s", warehouse)
	}

	if cfg.Enrich == nil {
		t.Fatal("floe's compose configuration has no enrich section")
	}
	host, port := urlHostPort(t, cfg.Enrich.URL)
	enrichd := digStrings(t, services["enrichd"], "command")
	if host != "enrichd" || len(enrichd) == 0 || enrichd[0] != "enrichd" {
		t.Errorf("floe's enrich.url %s does not reach the enrichd service running `floe enrichd` (%q)", cfg.Enrich.URL, enrichd)
	} else if _, lport := hostPort(t, flagValue(enrichd, "--listen")); lport != port {
		t.Errorf("enrichd listens on %d, floe's enrich.url uses %d", lport, port)
	}

	_, mport := hostPort(t, cfg.Metrics.Listen)
	if !publishes(t, floe, mport) {
		t.Errorf("services.floe does not publish the metrics port %d", mport)
	}
	if hc := strings.Join(digStrings(t, floe, "healthcheck", "test"), " "); !strings.Contains(hc, fmt.Sprintf(":%d/livez", mport)) {
		t.Errorf("services.floe healthcheck %q does not ask /livez on port %d", hc, mport)
	}
	stop, err := time.ParseDuration(digString(t, floe, "stop_grace_period"))
	if err != nil {
		t.Fatalf("services.floe.stop_grace_period: %v", err)
	}
	// The table's files are on HDFS: an HDFS call no node answers, in
	// progress when commit.grace ends, runs until hdfs.io-timeout.
	hcfg, err := hdfsio.ConfigFromProps(rpc, cfg.Table.Catalog)
	if err != nil {
		t.Fatalf("floe's table.catalog as hdfs:// IO properties: %v", err)
	}
	if hcfg.IOTimeout == 0 || stop <= cfg.Commit.Grace.D()+hcfg.IOTimeout+pipeline.StopOverhead {
		t.Errorf("services.floe.stop_grace_period %s is not longer than commit.grace %s + hdfs.io-timeout %s (2m unless set) + %s "+
			"(pipeline.StopOverhead): a stop with the services hanging would be killed", stop, cfg.Commit.Grace.D(), hcfg.IOTimeout, pipeline.StopOverhead)
	}

	// Both floe services build the image from this repository.
	for _, name := range []string{"floe", "enrichd"} {
		ctx := filepath.Join(deployDir(), digString(t, services[name], "build", "context"))
		df := filepath.Join(ctx, digString(t, services[name], "build", "dockerfile"))
		if ctx != repoRoot() || df != filepath.Join(deployDir(), "Dockerfile") {
			t.Errorf("services.%s builds %s in %s, want deploy/Dockerfile in the repository root", name, df, ctx)
		}
	}
}

// publishes reports whether a compose service publishes its container port
// port ("host:container" or "ip:host:container").
func publishes(t *testing.T, s map[string]any, port int) bool {
	t.Helper()
	if !has(s, "ports") {
		return false
	}
	for _, p := range digStrings(t, s, "ports") {
		parts := strings.Split(p, ":")
		if parts[len(parts)-1] == strconv.Itoa(port) {
			return true
		}
	}
	return false
}
