package cli

import (
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"os"

	"github.com/qlcontrol/controlcore/coordinator"
)

// Document is a JSON output: the body's fields after a schema field naming the document and its
// version (docs/json.md).
type Document struct {
	Schema string
	Body   any
}

func (d Document) MarshalJSON() ([]byte, error) {
	head, err := json.Marshal(struct {
		Schema string `json:"schema"`
	}{d.Schema})
	if err != nil {
		return nil, err
	}
	body, err := json.Marshal(d.Body)
	if err != nil {
		return nil, err
	}
	if len(body) < 2 || body[0] != '{' {
		return nil, fmt.Errorf("document %s: the body is not a JSON object", d.Schema)
	}
	if string(body) == "{}" {
		return head, nil
	}
	return append(append(head[:len(head)-1], ','), body[1:]...), nil
}

// Output prints v as JSON (a Document whose schema field names it, docs/json.md) when format is
// json, else runs text.
func Output(w io.Writer, format Format, v any, text func()) error {
	if format == "json" {
		enc := json.NewEncoder(w)
		enc.SetIndent("", "  ")
		return enc.Encode(v)
	}
	text()
	return nil
}

// LogLevel checks the --log-format and --log-level flags and returns the level.
func LogLevel(format, level string) (slog.Level, error) {
	var l slog.Level
	if format != "text" && format != "json" {
		return l, Usagef("--log-format %q: want text or json", format)
	}
	if err := l.UnmarshalText([]byte(level)); err != nil {
		return l, Usagef("--log-level %q: want debug, info, warn or error", level)
	}
	return l, nil
}

// Logger logs on stderr in format (text for terminals, json for collectors) from level on.
func Logger(format string, level slog.Level) *slog.Logger {
	opts := &slog.HandlerOptions{Level: level}
	if format == "json" {
		return slog.New(slog.NewJSONHandler(os.Stderr, opts))
	}
	return slog.New(slog.NewTextHandler(os.Stderr, opts))
}

// ConfigFlags is the flag of each coordinator.Config field: the library's errors name fields
// (ConfigError), the commands' users know flags. qlsched run has a flag for each; qlbench for
// the ones it sets (--budget, --cadence, --admit-batch).
var ConfigFlags = map[string]string{
	"Owner": "--owner", "Budget": "--budget", "Lease": "--lease", "Cadence": "--cadence",
	"DrainTimeout": "--drain-timeout", "AdmitRetries": "--admit-retries", "AdmitBatch": "--admit-batch",
	"BackoffCap": "--backoff-cap", "NotReadyAfter": "--not-ready-after",
	"InitBatch": "--init-batch", "InitBudget": "--init-budget",
}

// ConfigUsageError is a usage error (exit 2) for a coordinator configuration that Validate
// refused, naming the flag that sets the field.
func ConfigUsageError(err error) error {
	var ce *coordinator.ConfigError
	if errors.As(err, &ce) {
		if flag, ok := ConfigFlags[ce.Field]; ok {
			return Usagef("%s %s: want %s", flag, ce.Value, ce.Want)
		}
	}
	return &UsageError{Err: err}
}
