// Package kubernetes holds the deployment manifests; this test validates them against the
// Kubernetes API types (strict decoding: an unknown or misspelt field fails) and against qlsched
// itself (every flag the Deployment passes exists; the probes hit the endpoints qlsched serves).
package kubernetes

import (
	"bytes"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	batchv1 "k8s.io/api/batch/v1"
	corev1 "k8s.io/api/core/v1"
	policyv1 "k8s.io/api/policy/v1"
	"sigs.k8s.io/yaml"
)

func decode(t *testing.T, file string, into any) {
	t.Helper()
	body, err := os.ReadFile(file)
	if err != nil {
		t.Fatal(err)
	}
	if err := yaml.UnmarshalStrict(body, into); err != nil {
		t.Fatalf("%s: %v", file, err)
	}
}

func TestManifestsDecodeStrictly(t *testing.T) {
	files, _ := filepath.Glob("*.yaml")
	if len(files) != 9 {
		t.Fatalf("found %d manifests, want 9 (TestLoopManifests checks the closed loop's five): %v", len(files), files)
	}
	var ns corev1.Namespace
	decode(t, "namespace.yaml", &ns)
	var job batchv1.Job
	decode(t, "migrate-job.yaml", &job)
	var dep appsv1.Deployment
	decode(t, "qlsched-deployment.yaml", &dep)
	var pdb policyv1.PodDisruptionBudget
	decode(t, "qlsched-pdb.yaml", &pdb)

	for _, obj := range []struct{ kind, want, ns string }{
		{job.Kind, "Job", job.Namespace}, {dep.Kind, "Deployment", dep.Namespace}, {pdb.Kind, "PodDisruptionBudget", pdb.Namespace},
	} {
		if obj.kind != obj.want || obj.ns != ns.Name {
			t.Errorf("%s in namespace %q, want %s in %q", obj.kind, obj.ns, obj.want, ns.Name)
		}
	}
	if dep.Spec.Replicas == nil || *dep.Spec.Replicas != 3 {
		t.Errorf("replicas %v, want 3", dep.Spec.Replicas)
	}
	if ic := dep.Spec.Template.Spec.InitContainers; len(ic) != 1 || len(ic[0].Command) != 2 || ic[0].Command[0] != "qlmigrate" || ic[0].Command[1] != "probe" {
		t.Errorf("want one init container running [qlmigrate probe], got %+v", ic)
	}
	c := dep.Spec.Template.Spec.Containers[0]
	if c.ReadinessProbe == nil || c.ReadinessProbe.HTTPGet.Path != "/readyz" || c.LivenessProbe == nil || c.LivenessProbe.HTTPGet.Path != "/healthz" {
		t.Error("want a readiness probe on /readyz and a liveness probe on /healthz")
	}
	// qlsched serves its endpoints only after readiness and startup recovery: without a startup
	// probe the liveness probe would restart a replica whose recovery takes longer than 30 s.
	if sp := c.StartupProbe; sp == nil || sp.HTTPGet == nil || sp.HTTPGet.Path != "/healthz" || sp.PeriodSeconds*sp.FailureThreshold < 120 {
		t.Errorf("want a startup probe on /healthz allowing at least 2 minutes, got %+v", c.StartupProbe)
	}
	if c.Resources.Requests.Cpu().IsZero() || c.Resources.Requests.Memory().IsZero() {
		t.Error("want cpu and memory requests")
	}
	if pdb.Spec.MinAvailable == nil || pdb.Spec.MinAvailable.IntValue() < 1 || pdb.Spec.MinAvailable.IntValue() >= 3 {
		t.Errorf("PodDisruptionBudget minAvailable %v, want 1 … 2 of 3", pdb.Spec.MinAvailable)
	}
	// replicas whose rounds fail are not ready: a drain must not wait for them to become ready
	if p := pdb.Spec.UnhealthyPodEvictionPolicy; p == nil || *p != policyv1.AlwaysAllow {
		t.Errorf("PodDisruptionBudget unhealthyPodEvictionPolicy %v, want AlwaysAllow", p)
	}
	for k, v := range dep.Spec.Selector.MatchLabels {
		if dep.Spec.Template.Labels[k] != v || pdb.Spec.Selector.MatchLabels[k] != v {
			t.Errorf("selector %s=%s does not match the pod template and the PDB", k, v)
		}
	}
	if got := *dep.Spec.Template.Spec.TerminationGracePeriodSeconds; got < 15 {
		t.Errorf("terminationGracePeriodSeconds %d is shorter than withdraw grace + drain timeout (15 s)", got)
	}

	// Every flag the Deployment passes is a flag of `qlsched run`.
	bin := build(t, "qlsched")
	var help bytes.Buffer
	cmd := exec.Command(bin, "run", "--help")
	cmd.Stdout = &help
	if err := cmd.Run(); err != nil {
		t.Fatal(err)
	}
	if len(c.Command) != 2 || c.Command[0] != "qlsched" || c.Command[1] != "run" {
		t.Fatalf("command %v, want [qlsched run]", c.Command)
	}
	flag := regexp.MustCompile(`^--([a-z-]+)=`)
	for _, arg := range c.Args {
		m := flag.FindStringSubmatch(arg)
		if m == nil || !strings.Contains(help.String(), "--"+m[1]+" ") {
			t.Errorf("argument %q is not a qlsched run flag", arg)
		}
		if m != nil && m[1] == "http-addr" && !strings.HasSuffix(arg, fmt.Sprintf(":%d", c.Ports[0].ContainerPort)) {
			t.Errorf("%s does not serve the probes' port %d", arg, c.Ports[0].ContainerPort)
		}
	}

	// The migration Job: up in an init container, then verify, both run directly (the image is
	// distroless: no shell), and both are qlmigrate commands.
	pod := job.Spec.Template.Spec
	if len(pod.InitContainers) != 1 || len(pod.Containers) != 1 {
		t.Fatalf("job: %d init containers and %d containers, want 1 and 1", len(pod.InitContainers), len(pod.Containers))
	}
	qlmigrate := build(t, "qlmigrate")
	for _, step := range []struct {
		c    corev1.Container
		want string
	}{{pod.InitContainers[0], "up"}, {pod.Containers[0], "verify"}} {
		if len(step.c.Command) != 2 || step.c.Command[0] != "qlmigrate" || step.c.Command[1] != step.want {
			t.Errorf("job container %s runs %v, want [qlmigrate %s]", step.c.Name, step.c.Command, step.want)
			continue
		}
		if out, err := exec.Command(qlmigrate, step.want, "--help").CombinedOutput(); err != nil {
			t.Errorf("qlmigrate %s --help: %v\n%s", step.want, err, out)
		}
		if len(step.c.Env) == 0 || step.c.Env[0].Name != "QL_DATABASE_URL" || step.c.Env[0].ValueFrom.SecretKeyRef.Key != "owner-url" {
			t.Errorf("job container %s does not connect as the owner (QL_DATABASE_URL from owner-url)", step.c.Name)
		}
	}
	probe := dep.Spec.Template.Spec.InitContainers[0]
	probeHelp, err := exec.Command(qlmigrate, "probe", "--help").CombinedOutput()
	if err != nil {
		t.Fatalf("qlmigrate probe --help: %v\n%s", err, probeHelp)
	}
	for _, arg := range probe.Args {
		if m := flag.FindStringSubmatch(arg); m == nil || !strings.Contains(string(probeHelp), "--"+m[1]+" ") {
			t.Errorf("argument %q is not a qlmigrate probe flag", arg)
		}
	}
	if len(probe.Env) == 0 || probe.Env[0].ValueFrom.SecretKeyRef.Key != "runtime-url" {
		t.Errorf("the probe does not connect as the runtime role (runtime-url)")
	}
}

// binDir holds the commands the tests build, each once per run.
var binDir string

func TestMain(m *testing.M) {
	dir, err := os.MkdirTemp("", "manifests-bin-")
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
	binDir = dir
	code := m.Run()
	os.RemoveAll(dir)
	os.Exit(code)
}

// build builds one of the module's commands (once per test binary run) and returns its path.
func build(t *testing.T, name string) string {
	t.Helper()
	bin := filepath.Join(binDir, name)
	if _, err := os.Stat(bin); err == nil {
		return bin
	}
	if out, err := exec.Command("go", "build", "-o", bin, "../../cmd/"+name).CombinedOutput(); err != nil {
		t.Fatalf("build %s: %v\n%s", name, err, out)
	}
	return bin
}

// flagArgs reads "--name=value" arguments; anything else is an error of the test.
func flagArgs(t *testing.T, c corev1.Container) map[string]string {
	t.Helper()
	out := map[string]string{}
	flag := regexp.MustCompile(`^--([a-z-]+)=(.*)$`)
	for _, arg := range c.Args {
		m := flag.FindStringSubmatch(arg)
		if m == nil {
			t.Errorf("%s: argument %q is not --flag=value", c.Name, arg)
			continue
		}
		out[m[1]] = m[2]
	}
	return out
}

// secretPath says whether path lies in a volume of pod that is a Secret, and which one.
func secretPath(pod corev1.PodSpec, c corev1.Container, path string) (string, bool) {
	for _, m := range c.VolumeMounts {
		if !strings.HasPrefix(path, strings.TrimSuffix(m.MountPath, "/")+"/") {
			continue
		}
		for _, v := range pod.Volumes {
			if v.Name == m.Name && v.Secret != nil {
				return v.Secret.SecretName, true
			}
		}
	}
	return "", false
}

// noLiteralSecrets fails on an environment value or argument that carries a credential itself:
// a database URL, a worker or callback token, a key.
func noLiteralSecrets(t *testing.T, c corev1.Container) {
	t.Helper()
	literal := regexp.MustCompile(`postgres(ql)?://|qlw_|qlc_|BEGIN [A-Z ]*PRIVATE KEY|password`)
	for _, e := range c.Env {
		if e.Value != "" && literal.MatchString(e.Value) {
			t.Errorf("%s: env %s holds a literal credential; take it from a Secret", c.Name, e.Name)
		}
		if (e.Name == "QL_DATABASE_URL" || strings.Contains(e.Name, "TOKEN")) && (e.ValueFrom == nil || e.ValueFrom.SecretKeyRef == nil) {
			t.Errorf("%s: env %s is not from a Secret", c.Name, e.Name)
		}
	}
	for _, a := range c.Args {
		if literal.MatchString(a) || strings.HasPrefix(a, "--token=") {
			t.Errorf("%s: argument %q holds a literal credential", c.Name, a)
		}
	}
}

func durationArg(t *testing.T, args map[string]string, name string) time.Duration {
	t.Helper()
	d, err := time.ParseDuration(args[name])
	if err != nil {
		t.Fatalf("--%s=%q: %v", name, args[name], err)
	}
	return d
}

// The closed loop's manifests (issue 33): the dispatcher (Deployment, PDB, Service) and the
// workers (Deployment, PDB), checked against the binaries: every flag exists in the command's
// --help, the probes hit the port --http-addr serves and the paths its help names, the Service
// reaches --listen and the workers' --dispatcher names the Service, credentials (database URL,
// TLS pair, worker token) come from Secrets mounted or referenced, never literals, the workers
// never get a database URL nor the dispatcher's key, and the grace periods cover the drains.
func TestLoopManifests(t *testing.T) {
	var ns corev1.Namespace
	decode(t, "namespace.yaml", &ns)
	var dep, wdep appsv1.Deployment
	decode(t, "qlsched-dispatch-deployment.yaml", &dep)
	decode(t, "qlworker-deployment.yaml", &wdep)
	var pdb, wpdb policyv1.PodDisruptionBudget
	decode(t, "qlsched-dispatch-pdb.yaml", &pdb)
	decode(t, "qlworker-pdb.yaml", &wpdb)
	var svc corev1.Service
	decode(t, "qlsched-dispatch-service.yaml", &svc)
	for _, obj := range []struct{ kind, want, ns string }{{dep.Kind, "Deployment", dep.Namespace}, {wdep.Kind, "Deployment", wdep.Namespace},
		{pdb.Kind, "PodDisruptionBudget", pdb.Namespace}, {wpdb.Kind, "PodDisruptionBudget", wpdb.Namespace}, {svc.Kind, "Service", svc.Namespace}} {
		if obj.kind != obj.want || obj.ns != ns.Name {
			t.Errorf("%s in namespace %q, want %s in %q", obj.kind, obj.ns, obj.want, ns.Name)
		}
	}

	// ---- the dispatcher
	pod := dep.Spec.Template.Spec
	if len(pod.Containers) != 1 {
		t.Fatalf("dispatcher: %d containers, want 1", len(pod.Containers))
	}
	c := pod.Containers[0]
	if len(c.Command) != 2 || c.Command[0] != "qlsched" || c.Command[1] != "dispatch" {
		t.Fatalf("dispatcher command %v, want [qlsched dispatch]", c.Command)
	}
	help, err := exec.Command(build(t, "qlsched"), "dispatch", "--help").Output()
	if err != nil {
		t.Fatalf("qlsched dispatch --help: %v", err)
	}
	args := flagArgs(t, c)
	for name := range args {
		if !strings.Contains(string(help), "--"+name+" ") {
			t.Errorf("dispatcher: --%s is not a qlsched dispatch flag", name)
		}
	}
	if args["owner"] != "$(POD_NAME)" {
		t.Errorf("dispatcher --owner=%q, want $(POD_NAME): each replica names itself in logs and metrics", args["owner"])
	}
	port := func(name string) int32 {
		for _, p := range c.Ports {
			if p.Name == name {
				return p.ContainerPort
			}
		}
		t.Fatalf("dispatcher: no container port %q", name)
		return 0
	}
	if !strings.HasSuffix(args["http-addr"], fmt.Sprintf(":%d", port("http"))) {
		t.Errorf("--http-addr=%s does not serve the probes' port %d", args["http-addr"], port("http"))
	}
	if !strings.HasSuffix(args["listen"], fmt.Sprintf(":%d", port("worker"))) {
		t.Errorf("--listen=%s is not the worker port %d", args["listen"], port("worker"))
	}
	// the probes: the paths the --http-addr flag says it serves, on its port
	httpHelp := regexp.MustCompile(`(?m)^\s*--http-addr.*$`).FindString(string(help))
	for name, p := range map[string]*corev1.Probe{"startup": c.StartupProbe, "readiness": c.ReadinessProbe, "liveness": c.LivenessProbe} {
		if p == nil || p.HTTPGet == nil || p.HTTPGet.Port.StrVal != "http" || !strings.Contains(httpHelp, p.HTTPGet.Path) {
			t.Errorf("dispatcher %s probe %+v: want an HTTP probe on port http, on a path --http-addr serves (%s)", name, p, httpHelp)
		}
	}
	if c.ReadinessProbe == nil || c.ReadinessProbe.HTTPGet.Path != "/readyz" || c.LivenessProbe == nil || c.LivenessProbe.HTTPGet.Path != "/healthz" {
		t.Error("dispatcher: want readiness on /readyz (it fails on SIGTERM) and liveness on /healthz")
	}
	// TLS: a plaintext --listen on a non-loopback address is refused; the pair comes from a Secret
	if _, plain := args["allow-plaintext"]; plain {
		t.Error("dispatcher: --allow-plaintext; the worker protocol carries tokens: serve TLS")
	}
	for _, f := range []string{"tls-cert", "tls-key"} {
		if secret, ok := secretPath(pod, c, args[f]); !ok || secret != "qlsched-dispatch-tls" {
			t.Errorf("dispatcher --%s=%s is not a file of the qlsched-dispatch-tls Secret", f, args[f])
		}
	}
	noLiteralSecrets(t, c)
	if ic := pod.InitContainers; len(ic) != 1 || len(ic[0].Command) != 2 || ic[0].Command[0] != "qlmigrate" || ic[0].Command[1] != "probe" {
		t.Errorf("dispatcher: want one init container running [qlmigrate probe], got %+v", ic)
	}
	for _, x := range append([]corev1.Container{c}, pod.InitContainers...) {
		if !slicesHasRuntimeURL(x) {
			t.Errorf("dispatcher container %s does not connect as the runtime role (QL_DATABASE_URL from runtime-url)", x.Name)
		}
	}
	if got, min := time.Duration(*pod.TerminationGracePeriodSeconds)*time.Second,
		durationArg(t, args, "withdraw-grace")+durationArg(t, args, "drain-timeout")+4*time.Second; got < min {
		t.Errorf("dispatcher terminationGracePeriodSeconds %s < withdraw grace + drain timeout + the servers' shutdown (%s)", got, min)
	}
	if c.Resources.Requests.Cpu().IsZero() || c.Resources.Requests.Memory().IsZero() {
		t.Error("dispatcher: want cpu and memory requests")
	}
	if dep.Spec.Replicas == nil || *dep.Spec.Replicas < 2 {
		t.Errorf("dispatcher replicas %v, want at least 2 (workers fail over between them)", dep.Spec.Replicas)
	}
	if pdb.Spec.MinAvailable == nil || pdb.Spec.MinAvailable.IntValue() < 1 || pdb.Spec.MinAvailable.IntValue() >= int(*dep.Spec.Replicas) {
		t.Errorf("dispatcher PDB minAvailable %v, want 1 … replicas−1", pdb.Spec.MinAvailable)
	}

	// ---- the Service: selects the dispatcher pods, reaches --listen
	for k, v := range dep.Spec.Selector.MatchLabels {
		if dep.Spec.Template.Labels[k] != v || pdb.Spec.Selector.MatchLabels[k] != v || svc.Spec.Selector[k] != v {
			t.Errorf("dispatcher selector %s=%s does not match its pod template, PDB and Service", k, v)
		}
	}
	if len(svc.Spec.Ports) != 1 || svc.Spec.Ports[0].TargetPort.StrVal != "worker" {
		t.Fatalf("Service ports %+v, want one targeting the dispatcher's worker port", svc.Spec.Ports)
	}

	// ---- the workers
	wpod := wdep.Spec.Template.Spec
	if len(wpod.Containers) != 1 || len(wpod.InitContainers) != 0 {
		t.Fatalf("workers: %d containers, %d init containers; want 1 and none", len(wpod.Containers), len(wpod.InitContainers))
	}
	w := wpod.Containers[0]
	if len(w.Command) != 1 || w.Command[0] != "qlworker" {
		t.Fatalf("worker command %v, want [qlworker]", w.Command)
	}
	// qlworker --help exits 0 or 2 (the flag package's help): its text is what counts
	whelp, _ := exec.Command(build(t, "qlworker"), "--help").CombinedOutput()
	if !strings.Contains(string(whelp), "--dispatcher") {
		t.Fatalf("qlworker --help does not list its flags:\n%s", whelp)
	}
	wargs := flagArgs(t, w)
	for name := range wargs {
		if !regexp.MustCompile(`(?m)^\s*--` + regexp.QuoteMeta(name) + `(\s|$)`).Match(whelp) {
			t.Errorf("worker: --%s is not a qlworker flag", name)
		}
	}
	want := fmt.Sprintf("https://%s.%s.svc:%d", svc.Name, svc.Namespace, svc.Spec.Ports[0].Port)
	if wargs["dispatcher"] != want {
		t.Errorf("worker --dispatcher=%s, want the Service over TLS: %s", wargs["dispatcher"], want)
	}
	if secret, ok := secretPath(wpod, w, wargs["token-file"]); !ok || secret != "qlworker-token" {
		t.Errorf("worker --token-file=%s is not a file of the qlworker-token Secret", wargs["token-file"])
	}
	if _, ok := secretPath(wpod, w, wargs["ca-file"]); !ok {
		t.Errorf("worker --ca-file=%s is not a mounted file", wargs["ca-file"])
	}
	for _, v := range wpod.Volumes {
		if v.Secret != nil && v.Secret.SecretName == "qlsched-dispatch-tls" {
			t.Error("workers mount the dispatcher's TLS Secret (its private key): mount only the CA")
		}
	}
	noLiteralSecrets(t, w)
	for _, e := range w.Env {
		if e.Name == "QL_DATABASE_URL" || e.Name == "DATABASE_URL" || strings.HasPrefix(e.Name, "PG") {
			t.Errorf("worker env %s: workers never reach the database", e.Name)
		}
	}
	if w.StartupProbe != nil || w.ReadinessProbe != nil || w.LivenessProbe != nil {
		t.Error("worker: qlworker serves no HTTP; a probe could only fail")
	}
	if got, min := time.Duration(*wpod.TerminationGracePeriodSeconds)*time.Second, durationArg(t, wargs, "drain-grace")+2*time.Second; got < min {
		t.Errorf("worker terminationGracePeriodSeconds %s < drain grace + kill grace (%s): running jobs would be killed unreported", got, min)
	}
	if w.Resources.Requests.Cpu().IsZero() || w.Resources.Requests.Memory().IsZero() {
		t.Error("worker: want cpu and memory requests")
	}
	for k, v := range wdep.Spec.Selector.MatchLabels {
		if wdep.Spec.Template.Labels[k] != v || wpdb.Spec.Selector.MatchLabels[k] != v {
			t.Errorf("worker selector %s=%s does not match its pod template and PDB", k, v)
		}
	}
	if wpdb.Spec.MaxUnavailable == nil || wpdb.Spec.MaxUnavailable.IntValue() != 1 {
		t.Errorf("worker PDB maxUnavailable %v, want 1: one worker drains at a time", wpdb.Spec.MaxUnavailable)
	}
	// every command the manifests run is in the image deploy/Dockerfile builds
	dockerfile, err := os.ReadFile("../Dockerfile")
	if err != nil {
		t.Fatal(err)
	}
	for _, name := range []string{"qlsched", "qlmigrate", "qlworker"} {
		if !strings.Contains(string(dockerfile), "./cmd/"+name) || !strings.Contains(string(dockerfile), "/out/"+name+" ") {
			t.Errorf("deploy/Dockerfile does not build and copy %s into the image the manifests run", name)
		}
	}
	for _, p := range []policyv1.PodDisruptionBudget{pdb, wpdb} {
		if e := p.Spec.UnhealthyPodEvictionPolicy; e == nil || *e != policyv1.AlwaysAllow {
			t.Errorf("PDB %s unhealthyPodEvictionPolicy %v, want AlwaysAllow", p.Name, e)
		}
	}
}

func slicesHasRuntimeURL(c corev1.Container) bool {
	for _, e := range c.Env {
		if e.Name == "QL_DATABASE_URL" && e.ValueFrom != nil && e.ValueFrom.SecretKeyRef != nil &&
			e.ValueFrom.SecretKeyRef.Name == "control-core-db" && e.ValueFrom.SecretKeyRef.Key == "runtime-url" {
			return true
		}
	}
	return false
}
