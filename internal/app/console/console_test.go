package console_test

import (
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"net/url"
	"regexp"
	"strings"
	"testing"

	"github.com/google/uuid"

	"github.com/qlcontrol/controlcore/admin"
	"github.com/qlcontrol/controlcore/internal/app/console"
)

type response struct {
	code int
	body string
	h    http.Header
}

func get(t *testing.T, base, path string) response {
	t.Helper()
	return do(t, http.MethodGet, base+path)
}

func do(t *testing.T, method, u string) response {
	t.Helper()
	req, err := http.NewRequest(method, u, nil)
	if err != nil {
		t.Fatal(err)
	}
	res, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer res.Body.Close()
	b, err := io.ReadAll(res.Body)
	if err != nil {
		t.Fatal(err)
	}
	return response{res.StatusCode, string(b), res.Header}
}

// Every page shows what the database holds, with the security headers, and never the executor
// spec's secret.
func TestEveryPageShowsWhatIsStored(t *testing.T) {
	t.Parallel()
	s := seed(t)
	cases := []struct {
		path string
		want []string
	}{
		{"/", []string{`href="/projects/billing"`, `href="/projects/ops"`, "replica-a: 1", ">30<", "250ms",
			`<svg class="chart"`, "paused"}},
		{"/projects/billing", []string{"nightly", "hourly", "off", "<code>30 3 * * *</code>", "Europe/Berlin", "fire_once",
			"claimed by replica-a", "succeeded</span> for", "CET", "fire_once, grace 15m0s"}},
		{"/projects/ops", []string{"sweep", "America/New_York"}},
		{"/projects/billing/triggers/nightly", []string{"cron: 0 3 * * * → 30 3 * * *", "created", "Next occurrences",
			"(executor spec not shown)", "misfire fire_once, grace 15m0s", "misfire grace: 1m0s → 15m0s", "<dt>Missed</dt><dd>0 "}},
		{"/projects/billing/triggers/off", []string{"Disabled: none of these is claimed."}},
		{"/projects/billing/triggers/hourly", []string{"250ms", "claimed by replica-a",
			`<dt>Missed</dt><dd><span class="warn">7</span>, the last 2024-01-01 05:00:00 UTC`}},
		{"/projects/billing/runs", []string{"hourly", "250ms", "failed", "succeeded"}},
		{"/projects/billing/runs?state=failed&trigger=hourly", []string{"failed"}},
		{"/health", []string{"OK: the database is what this binary expects", "capability", "integrity"}},
		{"/static/console.css", []string{"svg.chart"}},
		{"/static/console.js", []string{"data-refresh"}},
	}
	for _, c := range cases {
		r := get(t, s.srv.URL, c.path)
		if r.code != http.StatusOK {
			t.Errorf("GET %s: %d, want 200\n%s", c.path, r.code, r.body)
			continue
		}
		for _, w := range c.want {
			if !strings.Contains(r.body, w) {
				t.Errorf("GET %s: the page lacks %q", c.path, w)
			}
		}
		if strings.Contains(r.body, secret) {
			t.Errorf("GET %s: the page shows an executor spec's secret", c.path)
		}
		if got := r.h.Get("Content-Security-Policy"); got != console.ContentSecurityPolicy {
			t.Errorf("GET %s: CSP %q, want %q", c.path, got, console.ContentSecurityPolicy)
		}
		if r.h.Get("X-Content-Type-Options") != "nosniff" || r.h.Get("Referrer-Policy") != "no-referrer" {
			t.Errorf("GET %s: headers %v lack nosniff or no-referrer", c.path, r.h)
		}
		if strings.HasSuffix(c.path, ".css") || strings.HasSuffix(c.path, ".js") {
			continue
		}
		// no inline script or style: the CSP would block them
		for _, bad := range []string{"<script>", " style=", "<style", "javascript:", " onclick=", " onload="} {
			if strings.Contains(r.body, bad) {
				t.Errorf("GET %s: the page holds %q, which the CSP forbids", c.path, bad)
			}
		}
	}
	// the state filter filters: only failed Runs (every tenth of the 30)
	r := get(t, s.srv.URL, "/projects/billing/runs?state=failed")
	if n := strings.Count(r.body, `class="run-failed"`); n != 3 {
		t.Errorf("runs?state=failed: %d failed rows, want 3", n)
	}
	if strings.Contains(r.body, `class="run-succeeded"`) {
		t.Error("runs?state=failed lists a succeeded Run")
	}
}

// The console has no write path, refuses hostile input with 400 and the reason (escaped), and
// says 404 for what does not exist.
func TestRefusesWritesAndHostileInput(t *testing.T) {
	t.Parallel()
	s := seed(t)
	for _, m := range []string{http.MethodPost, http.MethodPut, http.MethodDelete, http.MethodPatch} {
		for _, p := range []string{"/", "/projects/billing", "/projects/billing/runs"} {
			r := do(t, m, s.srv.URL+p)
			if r.code != http.StatusMethodNotAllowed || r.h.Get("Allow") != "GET, HEAD" {
				t.Errorf("%s %s: %d, Allow %q; want 405 and GET, HEAD", m, p, r.code, r.h.Get("Allow"))
			}
		}
	}
	if r := do(t, http.MethodHead, s.srv.URL+"/"); r.code != http.StatusOK {
		t.Errorf("HEAD /: %d, want 200", r.code)
	}
	script := url.QueryEscape(`<script>alert(1)</script>`)
	cases := []struct {
		path string
		code int
		want string
	}{
		{"/projects/billing/runs?state=" + script, 400, "&lt;script&gt;alert(1)&lt;/script&gt;"},
		{"/projects/billing/runs?state=done", 400, "is not a Run state"},
		{"/projects/billing/runs?trigger=" + script, 400, "trigger"},
		{"/projects/billing/runs?trigger=UPPER", 400, "trigger"},
		{"/projects/billing/runs?since=yesterday", 400, "since: want a time"},
		{"/projects/billing/runs?before=-5", 400, "before:"},
		{"/projects/billing/runs?before_run=x", 400, "before_run:"},
		{"/projects/billing/runs?state=failed&state=queued", 400, "given 2 times"},
		{"/projects/billing/runs?limit=100000", 400, "unknown parameter"},
		{"/projects/billing/runs?trigger=" + strings.Repeat("a", 300), 400, "longer than"},
		{"/?x=1", 400, "unknown parameter"},
		{"/projects/Billing", 400, "project"},
		{"/projects/billing?after=" + script, 400, "trigger"},
		{"/projects/nope", 404, "not found"},
		{"/projects/billing/triggers/nope", 404, "not found"},
		{"/projects/" + url.PathEscape("<b>x</b>") + "/runs", 400, "&lt;b&gt;x&lt;/b&gt;"},
		{"/nothing-here", 404, "no such page"},
		{"/static/", 404, "no such page"},
		{"/projects/billing/runs?" + strings.Repeat("z", 5000) + "=1", 400, strings.Repeat("z", 64) + "…"},
	}
	for _, c := range cases {
		r := get(t, s.srv.URL, c.path)
		if r.code != c.code || !strings.Contains(r.body, c.want) {
			t.Errorf("GET %s: %d %q; want %d and %q", c.path, r.code, errorMessage(r.body), c.code, c.want)
		}
		if strings.Contains(r.body, strings.Repeat("z", 65)) {
			t.Errorf("GET %s: the page repeats a long parameter name whole", c.path)
		}
		if strings.Contains(r.body, "<script>alert") || strings.Contains(r.body, "<b>x</b>") {
			t.Errorf("GET %s: the page echoes markup unescaped", c.path)
		}
		if r.h.Get("Content-Security-Policy") == "" {
			t.Errorf("GET %s: no CSP on an error page", c.path)
		}
	}
}

var errorRe = regexp.MustCompile(`id="error-message">([^<]*)<`)

func errorMessage(body string) string {
	if m := errorRe.FindStringSubmatch(body); m != nil {
		return m[1]
	}
	return body
}

// The runs pages walk every Run once, newest first, by keyset: following the "older Runs" links
// lists each of 120 Runs exactly once, for the project and for one trigger.
func TestRunsPagesWalkEveryRunOnce(t *testing.T) {
	t.Parallel()
	s := seed(t)
	s.d.Exec(t, `DELETE FROM control_core.runs`)
	insertRuns(t, s.d, 120, 1000)
	runRe := regexp.MustCompile(`<td><a href="/runs/[0-9a-f-]{36}"><code>([0-9a-f-]{36})</code></a></td>`)
	nextRe := regexp.MustCompile(`href="([^"]+)" rel="next"`)
	for _, start := range []string{"/projects/billing/runs", "/projects/billing/runs?trigger=hourly"} {
		seen := map[string]bool{}
		pages := 0
		for path := start; path != ""; pages++ {
			r := get(t, s.srv.URL, path)
			if r.code != 200 {
				t.Fatalf("GET %s: %d\n%s", path, r.code, r.body)
			}
			for _, m := range runRe.FindAllStringSubmatch(r.body, -1) {
				if seen[m[1]] {
					t.Errorf("%s: Run %s listed twice", start, m[1])
				}
				seen[m[1]] = true
			}
			path = ""
			if m := nextRe.FindStringSubmatch(r.body); m != nil {
				path = strings.ReplaceAll(m[1], "&amp;", "&")
			}
			if pages > 10 {
				t.Fatalf("%s: more than 10 pages", start)
			}
		}
		if len(seen) != 120 || pages != 3 {
			t.Errorf("%s: %d Runs on %d pages; want 120 on 3", start, len(seen), pages)
		}
	}
}

// The overview's walks of the due range stop at CountCap rows and say so: with 1,500
// due rows of disabled triggers an hour and more overdue, the backlog reads ≥ 1 (nightly,
// uninitialised) and live claims are counted among the newest rows only (replica-a's, on the row
// that fell due last, as a lower bound), so a claim on the oldest row (replica-b's) lies beyond
// the walk.
func TestOverviewCapsTheDueRangeWalks(t *testing.T) {
	t.Parallel()
	s := seed(t)
	s.d.Exec(t, `SET session_replication_role = replica;
		BEGIN;
		INSERT INTO control_core.triggers (project_id, trigger_id, head_revision)
		    SELECT 'billing', 'd' || g, 1 FROM generate_series(1, 1500) g;
		INSERT INTO control_core.trigger_revisions (project_id, trigger_id, revision, kind, cron_spec, timezone,
		        misfire_policy, misfire_grace_ms, enabled, task_id, task_revision, content_digest)
		    SELECT 'billing', 'd' || g, 1, 'cron', '0 * * * *', 'UTC', 'skip', 60000, false, 'job', 1, repeat('a', 64)
		    FROM generate_series(1, 1500) g;
		INSERT INTO control_core.trigger_schedules (project_id, trigger_id, trigger_revision, next_fire_at_ms,
		        state_version, claim_version, updated_at_ms)
		    SELECT 'billing', 'd' || g, 1, control_core.db_now_ms() - 3600000 - g, 1, 0, control_core.db_now_ms()
		    FROM generate_series(1, 1500) g;
		UPDATE control_core.trigger_schedules SET claim_owner = 'replica-b', claim_token = gen_random_uuid(),
		    claim_version = 1, claim_expires_at_ms = control_core.db_now_ms() + 600000
		WHERE project_id = 'billing' AND trigger_id = 'd1500';
		COMMIT;
		ANALYZE control_core.trigger_schedules;`)
	r := get(t, s.srv.URL, "/")
	if r.code != 200 {
		t.Fatalf("GET /: %d\n%s", r.code, r.body)
	}
	for _, want := range []string{"replica-a: ≥ 1", `class="num warn">≥ 1<`, ">≥ 1000<"} {
		if !strings.Contains(r.body, want) {
			t.Errorf("overview: no %q in\n%s", want, r.body)
		}
	}
	if strings.Contains(r.body, "replica-b") {
		t.Errorf("overview counts replica-b's claim on the oldest due row, beyond the walk's 1,000 newest rows:\n%s", r.body)
	}
}

// A page of another site that resolves its own name to the console's address (DNS rebinding)
// reaches it with that name in Host: refused, before any read. IP literals, localhost and the
// names of --allow-host are the console's own.
func TestRefusesAHostThatIsNotTheConsoles(t *testing.T) {
	t.Parallel()
	cases := []struct {
		bound string
		allow []string
		host  string
		ok    bool
	}{
		{"", nil, "127.0.0.1:9465", true},
		{"", nil, "[::1]:9465", true},
		{"", nil, "localhost:9465", true},
		{"", nil, "LocalHost.", true},
		{"", nil, "attacker.example:9465", false},
		{"", nil, "localhost.attacker.example", false},
		{"", nil, "127.0.0.1.nip.io:9465", false},
		{"", nil, "192.0.2.7:9465", false},
		{"", nil, "", false},
		{"192.0.2.7:9465", nil, "192.0.2.7:9465", true},
		{"192.0.2.7:9465", nil, "192.0.2.8:9465", false},
		{"0.0.0.0:9465", nil, "192.0.2.8:9465", true},
		{"0.0.0.0:9465", nil, "console.example.com", false},
		{"0.0.0.0:9465", []string{"console.example.com"}, "Console.Example.com:443", true},
		{"0.0.0.0:9465", []string{"console.example.com"}, "other.example.com", false},
	}
	for _, c := range cases {
		opts := console.Options{Reader: admin.NewReader(nil), AllowHosts: c.allow}
		if c.bound != "" {
			addr, err := net.ResolveTCPAddr("tcp", c.bound)
			if err != nil {
				t.Fatal(err)
			}
			opts.Addr = addr
		}
		h, err := console.Handler(opts)
		if err != nil {
			t.Fatal(err)
		}
		req := httptest.NewRequest(http.MethodGet, "/no-such-page", nil)
		req.Host = c.host
		rec := httptest.NewRecorder()
		h.ServeHTTP(rec, req)
		refused := rec.Code == http.StatusMisdirectedRequest
		if refused == c.ok || refused && !strings.Contains(rec.Body.String(), "--allow-host") {
			t.Errorf("bound %q, allow %q, Host %q: %d %q; want allowed=%v", c.bound, c.allow, c.host, rec.Code, rec.Body.String(), c.ok)
		}
		if rec.Header().Get("Content-Security-Policy") == "" {
			t.Errorf("Host %q: no CSP", c.host)
		}
	}
}

// The loop's pages: the workers page shows each live session's capacity, what it holds and what
// is free; the Run page tells the Run's story (worker, lease, exit status, the output tail
// escaped) and never a token, its hash or a callback token; the overview shows the queue; every
// Run a page lists links to its page.
func TestLoopPages(t *testing.T) {
	t.Parallel()
	s := seed(t)
	l := seedLoop(t, s)
	never := []string{secret, l.token, l.tokenHash, l.callbackToken, "<script>alert"}
	page := func(path string, want ...string) string {
		t.Helper()
		r := get(t, s.srv.URL, path)
		if r.code != http.StatusOK {
			t.Fatalf("GET %s: %d\n%s", path, r.code, r.body)
		}
		for _, w := range want {
			if !strings.Contains(r.body, w) {
				t.Errorf("GET %s: the page lacks %q", path, w)
			}
		}
		for _, n := range never {
			if strings.Contains(r.body, n) {
				t.Errorf("GET %s: the page shows %q", path, n)
			}
		}
		if r.h.Get("Content-Security-Policy") != console.ContentSecurityPolicy {
			t.Errorf("GET %s: no CSP", path)
		}
		return r.body
	}
	num := func(ns ...int) string { // consecutive numeric cells
		var b strings.Builder
		for i, n := range ns {
			if i > 0 {
				b.WriteString("\n")
			}
			fmt.Fprintf(&b, `<td class="num">%d</td>`, n)
		}
		return b.String()
	}
	workers := page("/workers", "w-busy", "w-drain", "fleet", "pool=batch", `<span class="warn">draining</span>`,
		"2 live sessions · capacity 5 · leases 1 · offers 0 · free 2 · ", "1 draining")
	row := func(id fmt.Stringer) string {
		_, after, _ := strings.Cut(workers, `<tr id="session-`+id.String()+`">`)
		r, _, _ := strings.Cut(after, "</tr>")
		return r
	}
	// capacity, leases held, offers, in flight, free
	if r := row(l.busy.ID); !strings.Contains(r, num(3, 1, 0, 1, 2)) || !strings.Contains(r, " ago") {
		t.Errorf("workers: w-busy's row, want capacity 3, 1 lease, 0 offers, 1 in flight, 2 free, a heartbeat:\n%s", r)
	}
	if r := row(l.draining.ID); !strings.Contains(r, num(2, 0, 0, 0, 0)) {
		t.Errorf("workers: w-drain's row, want capacity 2 and nothing free (draining):\n%s", r)
	}

	page("/runs/"+l.failed.String(), "Attempt 1: <span class=\"attempt-failed\">failed</span>", "w-busy", "token fleet",
		l.busy.ID.String(), "version 1, released, granted", "exit code 3", "ran 1.234s", "exit_status: exit status 3",
		"building…\n&lt;script&gt;alert(&#34;tail&#34;)&lt;/script&gt;\nexit 3", "run.created", `href="/projects/billing"`,
		"(executor spec not shown)", "max attempts 1, backoff 0s", "(the newest 1 of 1)")
	page("/runs/"+l.leased.String(), `<span class="run-running">running</span>`, "version 1, active", "expires", "w-busy", ">acked<")
	page("/runs/"+l.queued.String(), `<span class="run-queued">queued</span>`, "No offers", "Attempt 1: ")

	// the queue: billing's one queued Run, ready since it was queued; ops has none
	overview := page("/", `<a href="/projects/billing/runs?state=queued">1</a>`, `<a href="/projects/ops/runs?state=queued">0</a>`)
	if !regexp.MustCompile(`<td class="queue-head">ready \d+s ago</td>`).MatchString(overview) {
		t.Errorf("overview: no ready time for billing's queue head")
	}

	// every Run a page lists is a link to its page
	linked := regexp.MustCompile(`<a href="/runs/([0-9a-f-]{36})">`)
	unlinked := regexp.MustCompile(`<td><code>[0-9a-f-]{36}</code>`)
	for _, p := range []string{"/projects/billing/runs", "/projects/billing/runs?state=queued", "/projects/billing/triggers/hourly",
		"/projects/billing"} {
		body := page(p)
		links := linked.FindAllStringSubmatch(body, -1)
		if len(links) == 0 {
			t.Errorf("GET %s: no Run links", p)
			continue
		}
		if m := unlinked.FindString(body); m != "" {
			t.Errorf("GET %s: a Run id without its link: %s", p, m)
		}
		if r := get(t, s.srv.URL, "/runs/"+links[0][1]); r.code != http.StatusOK {
			t.Errorf("GET %s: its first Run link answers %d", p, r.code)
		}
	}
	if body := page("/projects/billing/runs?state=queued"); !strings.Contains(body, `href="/runs/`+l.queued.String()+`"`) {
		t.Error("the queued runs page does not link the queued Run")
	}

	for _, c := range []struct {
		path string
		code int
		want string
	}{
		{"/runs/not-a-uuid", 400, "want a Run id"},
		{"/runs/" + url.PathEscape("<b>x</b>"), 400, "want a Run id"},
		{"/runs/00000000-0000-0000-0000-000000000000", 400, "nil UUID"},
		{"/runs/" + uuid.NewString(), 404, "not found"},
		{"/runs/" + l.failed.String() + "?events=5", 400, "unknown parameter"},
		{"/workers?all=1", 400, "unknown parameter"},
	} {
		r := get(t, s.srv.URL, c.path)
		if r.code != c.code || !strings.Contains(r.body, c.want) {
			t.Errorf("GET %s: %d %q; want %d and %q", c.path, r.code, errorMessage(r.body), c.code, c.want)
		}
	}
}

// The replicas page lists every registration by owner (pg-0024): a live replica and a crashed
// one's expired row, told apart, with host, version and instance; none registered says so.
func TestReplicasPage(t *testing.T) {
	t.Parallel()
	s := seed(t)
	if r := get(t, s.srv.URL, "/replicas"); r.code != http.StatusOK || !strings.Contains(r.body, "No replica registered.") ||
		!strings.Contains(r.body, "0 live · 0 registered") {
		t.Errorf("GET /replicas with none registered: %d\n%s", r.code, r.body)
	}
	s.d.Exec(t, `INSERT INTO control_core.replicas (owner, instance_id, hostname, version, started_at_ms, heartbeat_at_ms, expires_at_ms)
		SELECT 'replica-live', '6f1c0c6e-0000-4000-8000-000000000001'::uuid, 'host-a', 'v1.2.3', n - 60000, n, n + 15000 FROM (SELECT control_core.db_now_ms() AS n) x
		UNION ALL
		SELECT 'replica-gone', '6f1c0c6e-0000-4000-8000-000000000002'::uuid, 'host-b', 'v1.2.2', n - 900000, n - 600000, n - 585000 FROM (SELECT control_core.db_now_ms() AS n) x`)
	r := get(t, s.srv.URL, "/replicas")
	if r.code != http.StatusOK {
		t.Fatalf("GET /replicas: %d\n%s", r.code, r.body)
	}
	for _, w := range []string{"1 live · 2 registered", "host-a", "v1.2.3", "6f1c0c6e-0000-4000-8000-000000000001", "host-b",
		`<a href="/replicas" class="active">Replicas</a>`} {
		if !strings.Contains(r.body, w) {
			t.Errorf("GET /replicas lacks %q:\n%s", w, r.body)
		}
	}
	row := func(owner string) string {
		_, after, _ := strings.Cut(r.body, `<tr id="replica-`+owner+`">`)
		row, _, _ := strings.Cut(after, "</tr>")
		return row
	}
	if live, gone := row("replica-live"), row("replica-gone"); !strings.Contains(live, "<td>live</td>") ||
		!strings.Contains(gone, `<span class="warn">expired</span>`) {
		t.Errorf("rows: live %q, gone %q; want live, then expired", live, gone)
	}
	if r := get(t, s.srv.URL, "/replicas?x=1"); r.code != http.StatusBadRequest {
		t.Errorf("GET /replicas?x=1: %d, want 400", r.code)
	}
}
