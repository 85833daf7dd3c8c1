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
	if len(files) != 4 {
		t.Fatalf("found %d manifests, want 4: %v", len(files), files)
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
	bin := filepath.Join(t.TempDir(), "qlsched")
	if out, err := exec.Command("go", "build", "-o", bin, "../../cmd/qlsched").CombinedOutput(); err != nil {
		t.Fatalf("build qlsched: %v\n%s", err, out)
	}
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
	qlmigrate := filepath.Join(t.TempDir(), "qlmigrate")
	if out, err := exec.Command("go", "build", "-o", qlmigrate, "../../cmd/qlmigrate").CombinedOutput(); err != nil {
		t.Fatalf("build qlmigrate: %v\n%s", err, out)
	}
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
