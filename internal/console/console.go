package console

import (
	"context"
	"embed"
	"errors"
	"html/template"
	"io/fs"
	"log/slog"
	"net/http"
	"sync"
	"time"

	"github.com/qlcontrol/controlcore/admin"
	"github.com/qlcontrol/controlcore/internal/verify"
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
	for _, page := range []string{"overview", "project", "trigger", "runs", "health", "error"} {
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
	mux.HandleFunc("GET /health", s.health)
	// one segment: a file of the embedded directory, never the directory's listing (GET / answers it)
	mux.Handle("GET /static/{file}", http.StripPrefix("/static/", http.FileServerFS(static)))
	mux.HandleFunc("GET /", func(w http.ResponseWriter, r *http.Request) {
		s.fail(w, r, http.StatusNotFound, "no such page: "+r.URL.Path)
	})
	return secure(mux), nil
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
