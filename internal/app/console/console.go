package console

import (
	"context"
	"embed"
	"errors"
	"fmt"
	"html/template"
	"io/fs"
	"log/slog"
	"net"
	"net/http"
	"strings"
	"sync"
	"time"

	"github.com/qlcontrol/controlcore/admin"
	"github.com/qlcontrol/controlcore/internal/app/verify"
)

//go:embed templates/*.html
var templateFS embed.FS

//go:embed static
var staticFS embed.FS

// ContentSecurityPolicy is sent with every response: nothing but the console's own stylesheet,
// script and images; no inline script or style, no frames, forms only to the console (the
// filters are GET forms).
const ContentSecurityPolicy = "default-src 'none'; style-src 'self'; script-src 'self'; img-src 'self'; connect-src 'self'; " +
	"base-uri 'none'; form-action 'self'; frame-ancestors 'none'"

// DefaultRefresh is how often the overview reloads itself when the browser runs the script.
const DefaultRefresh = 30 * time.Second

// Options configure the console. Reader is required; Health, when set, reads the schema health
// page's verification (the command passes verify.Run with ScopeProbe).
type Options struct {
	Reader *admin.Reader
	Health func(ctx context.Context) (*verify.Report, error)
	Log    *slog.Logger
	// Refresh is the overview's auto-refresh period (0: DefaultRefresh).
	Refresh time.Duration
	// RequestTimeout bounds each page's reads (0: 10 s).
	RequestTimeout time.Duration
	// Addr is the address the console is bound to (nil: loopback). Requests must name it, a
	// loopback address or "localhost" in their Host, or one of AllowHosts: a page of another
	// site that resolves its own name to this address (DNS rebinding) is refused.
	Addr *net.TCPAddr
	// AllowHosts are further names requests may carry in Host: the name a reverse proxy forwards.
	AllowHosts []string
}

// Validate refuses options the console cannot serve with.
func (o Options) Validate() error {
	if o.Reader == nil {
		return errors.New("console: Options.Reader is required")
	}
	if o.Refresh < 0 || o.RequestTimeout < 0 {
		return errors.New("console: Refresh and RequestTimeout must not be negative")
	}
	return nil
}

// server holds the parsed templates and the zones the pages render times in.
type server struct {
	opts  Options
	pages map[string]*template.Template
	zones sync.Map // zone name → *time.Location (nil: unknown)
}

// Handler serves the console.
func Handler(opts Options) (http.Handler, error) {
	if err := opts.Validate(); err != nil {
		return nil, err
	}
	if opts.Log == nil {
		opts.Log = slog.New(slog.DiscardHandler)
	}
	if opts.Refresh == 0 {
		opts.Refresh = DefaultRefresh
	}
	if opts.RequestTimeout == 0 {
		opts.RequestTimeout = 10 * time.Second
	}
	s := &server{opts: opts, pages: map[string]*template.Template{}}
	for _, page := range []string{"overview", "project", "trigger", "runs", "run", "workers", "replicas", "health", "error"} {
		t, err := template.New("layout.html").Funcs(s.funcs()).ParseFS(templateFS, "templates/layout.html", "templates/"+page+".html")
		if err != nil {
			return nil, err
		}
		s.pages[page] = t
	}
	static, err := fs.Sub(staticFS, "static")
	if err != nil {
		return nil, err
	}
	mux := http.NewServeMux()
	mux.HandleFunc("GET /{$}", s.overview)
	mux.HandleFunc("GET /projects/{project}", s.project)
	mux.HandleFunc("GET /projects/{project}/triggers/{trigger}", s.trigger)
	mux.HandleFunc("GET /projects/{project}/runs", s.runs)
	mux.HandleFunc("GET /runs/{run}", s.run)
	mux.HandleFunc("GET /workers", s.workers)
	mux.HandleFunc("GET /replicas", s.replicas)
	mux.HandleFunc("GET /health", s.health)
	// one segment: a file of the embedded directory, never the directory's listing (GET / answers it)
	mux.Handle("GET /static/{file}", http.StripPrefix("/static/", http.FileServerFS(static)))
	mux.HandleFunc("GET /", func(w http.ResponseWriter, r *http.Request) {
		s.fail(w, r, http.StatusNotFound, "no such page: "+r.URL.Path)
	})
	return secure(s.hostCheck(mux)), nil
}

// hostCheck refuses a request whose Host is none of the console's own names (Options.Addr). A
// rebinding attack reaches the console under the attacker's name, never under an IP literal
// or localhost, so those are allowed: any IP literal when the console listens on every address.
func (s *server) hostCheck(next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if !s.hostAllowed(r.Host) {
			http.Error(w, fmt.Sprintf("Host %.64q is not this console's address: open it by its IP address or localhost, "+
				"or start qlsched ui with --allow-host for the name a proxy forwards", r.Host), http.StatusMisdirectedRequest)
			return
		}
		next.ServeHTTP(w, r)
	})
}

func (s *server) hostAllowed(hostport string) bool {
	host := hostport
	if h, _, err := net.SplitHostPort(hostport); err == nil {
		host = h
	}
	host = strings.TrimSuffix(strings.ToLower(strings.Trim(host, "[]")), ".")
	if host == "localhost" {
		return true
	}
	if ip := net.ParseIP(host); ip != nil {
		bound := s.opts.Addr
		return ip.IsLoopback() || bound != nil && (bound.IP.IsUnspecified() || bound.IP.Equal(ip))
	}
	for _, name := range s.opts.AllowHosts {
		if strings.EqualFold(strings.TrimSuffix(name, "."), host) {
			return true
		}
	}
	return false
}

// secure sets the security headers on every response and refuses every method but GET and HEAD:
// the console has no write path.
func secure(next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		h := w.Header()
		h.Set("Content-Security-Policy", ContentSecurityPolicy)
		h.Set("X-Content-Type-Options", "nosniff")
		h.Set("Referrer-Policy", "no-referrer")
		h.Set("X-Frame-Options", "DENY")
		h.Set("Cache-Control", "no-store")
		if r.Method != http.MethodGet && r.Method != http.MethodHead {
			h.Set("Allow", "GET, HEAD")
			http.Error(w, "the console is read-only: GET and HEAD only", http.StatusMethodNotAllowed)
			return
		}
		next.ServeHTTP(w, r)
	})
}
