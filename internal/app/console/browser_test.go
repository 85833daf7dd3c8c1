package console_test

import (
	"bytes"
	"context"
	"flag"
	"fmt"
	"net/http"
	"net/http/httptest"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/qlcontrol/controlcore/internal/app/console"
)

var update = flag.Bool("update", false, "write the overview's screenshot to docs/console-overview.png")

// chromium finds the browser: $QL_CHROMIUM, else Debian's chromium on PATH (.ci/run installs it).
func chromium(t *testing.T) string {
	t.Helper()
	if p := os.Getenv("QL_CHROMIUM"); p != "" {
		return p
	}
	for _, name := range []string{"chromium", "chromium-browser", "google-chrome"} {
		if p, err := exec.LookPath(name); err == nil {
			return p
		}
	}
	t.Fatal("no headless browser: install Debian's chromium (apt-get install chromium; .ci/run does) or set QL_CHROMIUM")
	return ""
}

// A headless Chromium loads every page of a seeded database: each renders the expected triggers
// and figures, the script runs under the CSP (it marks <html class="js">), and the browser logs
// nothing to its console (a CSP violation, a failed load or a script error would be a line).
// Screenshots go to the test's folder, or $QL_CONSOLE_SCREENSHOTS; with -update the overview's
// goes to docs/console-overview.png.
func TestBrowserLoadsEveryPage(t *testing.T) {
	t.Parallel()
	bin := chromium(t)
	s := seed(t)
	// admissions of nightly too, uneven over the hour, so the chart has a shape
	s.d.Exec(t, `
		INSERT INTO control_core.runs (run_id, project_id, task_id, task_revision, execution_revision_id, trigger_id,
		        trigger_revision, scheduled_for_ms, idempotency_key, state, owner, queued_at_ms, created_at_ms, updated_at_ms)
		SELECT gen_random_uuid(), 'billing', 'job', 1, kr.execution_revision_id, 'nightly', 2, x.at - x.lag,
		       control_core.cron_idempotency_key('nightly', 2, x.at - x.lag), 'succeeded', 'runtime', x.at, x.at, x.at
		FROM generate_series(1, 400) g
		CROSS JOIN LATERAL (SELECT control_core.db_now_ms() - (3500000 * sqrt(g / 400.0))::bigint - g AS at,
		                           (80 + (g * 37) % 300 + CASE WHEN g % 97 = 0 THEN 1800 ELSE 0 END)::bigint AS lag) x
		JOIN control_core.task_revisions kr ON kr.project_id = 'billing' AND kr.task_id = 'job' AND kr.revision = 1`)
	l := seedLoop(t, s) // worker sessions, a failed Run whose output tail holds a script, one leased, one queued
	// live for the whole test: the pages before this one take tens of seconds on a loaded machine
	s.d.Exec(t, `INSERT INTO control_core.replicas (owner, instance_id, hostname, version, started_at_ms, heartbeat_at_ms, expires_at_ms)
		SELECT 'replica-a', gen_random_uuid(), 'host-a', 'v1.2.3', n - 60000, n, n + 3600000 FROM (SELECT control_core.db_now_ms() AS n) x`)
	shots := t.TempDir()
	if dir := os.Getenv("QL_CONSOLE_SCREENSHOTS"); dir != "" {
		shots = dir
	}
	pages := []struct {
		name, path string
		want       []string
	}{
		{"overview", "/", []string{"billing", "ops", "replica-a: 1", ">430<", `<svg class="chart"`, `<rect class="bar"`,
			`<a href="/projects/billing/runs?state=queued">1</a>`}},
		{"project", "/projects/billing", []string{"nightly", "hourly", "off", "Europe/Berlin", "fire_once", "claimed by replica-a"}},
		{"trigger", "/projects/billing/triggers/nightly", []string{"cron: 0 3 * * * → 30 3 * * *", "Next occurrences", "Revision history"}},
		{"runs", "/projects/billing/runs?trigger=hourly&state=failed", []string{"hourly", "failed", "250ms"}},
		{"workers", "/workers", []string{"w-busy", "w-drain", "2 live sessions · capacity 5 · leases 1", "draining"}},
		{"replicas", "/replicas", []string{"replica-a", "host-a", "1 live · 1 registered"}},
		// the tail's script is text (escaped in the DOM's serialisation): had it been markup, the
		// CSP would block it and the console check below would see the violation
		{"run", "/runs/" + l.failed.String(), []string{"Attempt 1", "w-busy", "exit code 3", "&lt;script&gt;alert(\"tail\")&lt;/script&gt;",
			"run.created"}},
		{"health", "/health", []string{"OK: the database is what this binary expects"}},
		{"not-found", "/projects/nope", []string{"not found"}},
	}
	for _, p := range pages {
		t.Run(p.name, func(t *testing.T) { // one browser at a time: each is a dozen processes
			shot := filepath.Join(shots, "console-"+p.name+".png")
			dom, console := browse(t, bin, s.srv.URL+p.path, shot)
			for _, w := range append(p.want, `class="js"`) {
				if !strings.Contains(dom, w) {
					t.Errorf("%s: the rendered page lacks %q", p.path, w)
				}
			}
			for _, never := range []string{secret, l.token, l.tokenHash, l.callbackToken} {
				if strings.Contains(dom, never) {
					t.Errorf("%s: the page shows a secret (%.6s…)", p.path, never)
				}
			}
			if len(console) > 0 {
				t.Errorf("%s: the browser's console says:\n%s", p.path, strings.Join(console, "\n"))
			}
			if st, err := os.Stat(shot); err != nil || st.Size() < 1000 {
				t.Errorf("%s: no screenshot at %s (%v)", p.path, shot, err)
			}
			t.Logf("%s: screenshot %s", p.path, shot)
			if *update && p.name == "overview" {
				b, err := os.ReadFile(shot)
				if err == nil {
					err = os.WriteFile("../../../docs/console-overview.png", b, 0o644)
				}
				if err != nil {
					t.Fatal(err)
				}
			}
		})
	}
}

// browse loads url in a headless Chromium, saving a screenshot, and returns the DOM after load
// and the lines the page wrote to the browser's console (Chromium logs them to stderr as
// "…:CONSOLE:…] message, source: …" with --enable-logging=stderr).
func browse(t *testing.T, bin, url, shot string) (dom string, console []string) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	cmd := exec.CommandContext(ctx, bin, "--headless=new", "--no-sandbox", "--disable-gpu", "--no-first-run",
		"--disable-extensions", "--disable-background-networking", "--disable-sync", "--hide-scrollbars",
		"--user-data-dir="+t.TempDir(), "--enable-logging=stderr", "--v=0", "--window-size=1400,900",
		"--screenshot="+shot, "--dump-dom", url)
	var stdout, stderr bytes.Buffer
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	if err := cmd.Run(); err != nil {
		t.Fatalf("%s %s: %v\n%s", bin, url, err, tail(stderr.String(), 40))
	}
	for _, line := range strings.Split(stderr.String(), "\n") {
		if strings.Contains(line, ":CONSOLE") || strings.Contains(line, "CONSOLE(") {
			console = append(console, line)
		}
	}
	return stdout.String(), console
}

func tail(s string, n int) string {
	lines := strings.Split(s, "\n")
	if len(lines) > n {
		lines = lines[len(lines)-n:]
	}
	return fmt.Sprint(strings.Join(lines, "\n"))
}

// The console check bites: a page with an inline script and an inline style under the console's
// CSP makes the browser log the two violations, which browse reports.
func TestBrowserReportsCSPViolations(t *testing.T) {
	t.Parallel()
	bin := chromium(t)
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
		w.Header().Set("Content-Security-Policy", console.ContentSecurityPolicy)
		fmt.Fprint(w, `<!doctype html><title>x</title><p style="color:red">inline style</p><script>document.title="ran"</script>`)
	}))
	defer srv.Close()
	dom, lines := browse(t, bin, srv.URL, filepath.Join(t.TempDir(), "csp.png"))
	if len(lines) < 2 || !strings.Contains(strings.Join(lines, "\n"), "Content Security Policy") {
		t.Errorf("the browser's console says %q; want the two CSP violations", lines)
	}
	if strings.Contains(dom, "<title>ran</title>") {
		t.Error("the inline script ran despite the CSP")
	}
}
