// Package cli holds what the binaries share at their edge: the exit-code contract, usage
// errors, --version, JSON documents and logs, and running a cobra command tree with them.
package cli

import (
	"errors"
	"fmt"
	"io"
	"regexp"
	"strconv"
	"unicode/utf8"

	"github.com/jackc/pgerrcode"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/spf13/cobra"
	"github.com/spf13/pflag"

	"github.com/qlcontrol/controlcore/internal/base/dbconn"
	"github.com/qlcontrol/controlcore/roles"
)

// Exit codes of every command.
const (
	ExitOK       = 0
	ExitProblem  = 1 // a check found a problem: drift, readiness, privileged role, lost fence …
	ExitUsage    = 2 // bad usage or configuration, reported before any connection is opened
	ExitDatabase = 3 // cannot connect, or the database failed
	// ExitInterrupted: SIGINT or SIGTERM stopped a command that does not treat them as its normal
	// end (qlsched run does, and exits 0); what it started has been cleaned up.
	ExitInterrupted = 130
)

// UsageError is bad usage or configuration.
type UsageError struct{ Err error }

func (e *UsageError) Error() string { return e.Err.Error() }
func (e *UsageError) Unwrap() error { return e.Err }

// Usagef returns a UsageError.
func Usagef(format string, args ...any) error {
	return &UsageError{Err: fmt.Errorf(format, args...)}
}

// ProblemError means a check ran and found a problem; its report has been printed.
type ProblemError struct{ Err error }

func (e *ProblemError) Error() string { return e.Err.Error() }
func (e *ProblemError) Unwrap() error { return e.Err }

// Problemf returns a ProblemError.
func Problemf(format string, args ...any) error {
	return &ProblemError{Err: fmt.Errorf(format, args...)}
}

// ExitCode maps an error onto the exit-code contract.
func ExitCode(err error) int {
	var (
		usage   *UsageError
		config  *dbconn.ConfigError
		problem *ProblemError
		pgErr   *pgconn.PgError
	)
	switch {
	case err == nil:
		return ExitOK
	case errors.As(err, &usage), errors.As(err, &config):
		return ExitUsage
	case errors.As(err, &problem):
		return ExitProblem
	case errors.As(err, &pgErr) && pgErr.Code == pgerrcode.RaiseException:
		// RAISE EXCEPTION from our own SQL: a check inside a migration failed
		return ExitProblem
	default:
		return ExitDatabase
	}
}

// Run executes root with args, prints the error (redacted by redact when given) to stderr and
// returns the exit code. SIGINT and SIGTERM cancel the command's context; a second one closes
// its SecondSignal.
func Run(root *cobra.Command, args []string, stderr io.Writer, redact func(string) string) int {
	root.SilenceErrors, root.SilenceUsage = true, true
	root.SetFlagErrorFunc(func(c *cobra.Command, err error) error {
		return &UsageError{Err: fmt.Errorf("%s (see %s --help)", flagError(err), c.CommandPath())}
	})
	wrapArgs(root)
	ctx, stop := signalContext()
	defer stop()
	root.SetArgs(args)
	err := root.ExecuteContext(ctx)
	// Interrupted: whatever failed after the signal failed because of it (a driver closing its
	// connection on cancellation does not always wrap context.Canceled).
	if err != nil && ctx.Err() != nil {
		fmt.Fprintf(stderr, "%s: interrupted\n", root.Name())
		return ExitInterrupted
	}
	if err != nil {
		msg := err.Error()
		if redact != nil {
			msg = redact(msg)
		}
		fmt.Fprintf(stderr, "%s: %s\n", root.Name(), msg)
	}
	return ExitCode(err)
}

// safeWord matches the command-line words a message may quote: command names and flag values of
// the usual kinds (numbers, durations, names). Anything else (a URL, a DSN, JSON) is described by
// its length only: a word typed in the wrong place may carry a password.
var safeWord = regexp.MustCompile(`^[A-Za-z0-9_.+-]{1,40}$`)

// Word quotes a command-line word for a message, or says only how long it is.
func Word(s string) string {
	if safeWord.MatchString(s) {
		return strconv.Quote(s)
	}
	return fmt.Sprintf("(%d characters, not shown: they may hold a secret)", utf8.RuneCountInString(s))
}

// flagError restates pflag's errors, which quote the offending word, with Word.
func flagError(err error) string {
	var (
		invalid  *pflag.InvalidValueError
		syntax   *pflag.InvalidSyntaxError
		notExist *pflag.NotExistError
	)
	switch {
	case errors.As(err, &invalid) && !safeWord.MatchString(invalid.GetValue()):
		return fmt.Sprintf("invalid argument %s for \"--%s\" flag (want a %s)", Word(invalid.GetValue()), invalid.GetFlag().Name, invalid.GetFlag().Value.Type())
	case errors.As(err, &syntax) && !safeWord.MatchString(syntax.GetSpecifiedFlag()):
		return "bad flag syntax: " + Word(syntax.GetSpecifiedFlag())
	case errors.As(err, &notExist) && notExist.GetSpecifiedShortnames() != "" && !safeWord.MatchString(notExist.GetSpecifiedShortnames()):
		return "unknown shorthand flag in " + Word("-"+notExist.GetSpecifiedShortnames())
	}
	return err.Error()
}

// Explain passes the error of every command of the tree, before it is printed, through explain
// (dbconn.PoolerHint: an undetected transaction pooler's sign turned into what to do about it).
func Explain(cmd *cobra.Command, explain func(error) error) {
	if run := cmd.RunE; run != nil {
		cmd.RunE = func(c *cobra.Command, args []string) error { return explain(run(c, args)) }
	}
	for _, sub := range cmd.Commands() {
		Explain(sub, explain)
	}
}

// wrapArgs makes argument-count errors and unknown sub-commands usage errors; no message quotes
// an argument unless Word allows it.
func wrapArgs(c *cobra.Command) {
	if c.Args == nil {
		if c.HasSubCommands() {
			c.Args = func(cmd *cobra.Command, args []string) error {
				if len(args) > 0 {
					return Usagef("unknown command %s for %q (see %s --help)", Word(args[0]), cmd.CommandPath(), cmd.CommandPath())
				}
				return Usagef("%s needs a sub-command (see %s --help)", cmd.CommandPath(), cmd.CommandPath())
			}
			if c.RunE == nil && c.Run == nil {
				c.RunE = func(cmd *cobra.Command, args []string) error { return cmd.Args(cmd, args) }
			}
		} else {
			c.Args = func(cmd *cobra.Command, args []string) error {
				if len(args) > 0 {
					return Usagef("unknown command %s for %q: it takes no arguments (see %s --help)", Word(args[0]), cmd.CommandPath(), cmd.CommandPath())
				}
				return nil
			}
		}
	}
	inner := c.Args
	c.Args = func(cmd *cobra.Command, args []string) error {
		if err := inner(cmd, args); err != nil {
			var usage *UsageError
			if errors.As(err, &usage) {
				return err
			}
			return &UsageError{Err: fmt.Errorf("%w (see %s --help)", err, cmd.CommandPath())}
		}
		return nil
	}
	for _, sub := range c.Commands() {
		wrapArgs(sub)
	}
}

// RolePrefixError maps roles.NewNames' refusal onto the --role-prefix flag both binaries take.
func RolePrefixError(err error) error {
	var pe *roles.PrefixError
	if errors.As(err, &pe) {
		return Usagef("--role-prefix %q: want %s", pe.Prefix, pe.Want())
	}
	return &UsageError{Err: err}
}

// Format is the --format flag of both binaries. Its value is checked as the flag is parsed, so
// every command, and --version (which runs before any hook), sees text or json only.
type Format string

// FormatVar defines --format on fs, defaulting to text.
func FormatVar(fs *pflag.FlagSet, f *Format) {
	*f = "text"
	fs.Var(f, "format", "output format: text or json")
}

func (f *Format) String() string { return string(*f) }
func (f *Format) Type() string   { return "format" }
func (f *Format) Set(s string) error {
	if s != "text" && s != "json" {
		return errors.New("want text or json")
	}
	*f = Format(s)
	return nil
}
