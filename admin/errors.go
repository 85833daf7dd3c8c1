package admin

import (
	"errors"
	"fmt"

	"github.com/qlcontrol/controlcore/internal/base/limits"
)

// The input fields a FieldError names. A command-line tool maps them onto its flags.
const (
	FieldProject      = "project"
	FieldTask         = "task"
	FieldTrigger      = "trigger"
	FieldCron         = "cron"
	FieldTimeZone     = "timezone"
	FieldMisfire      = "misfire"
	FieldMisfireGrace = "misfire_grace"
	FieldExecutorSpec = "executor_spec"
	FieldLimit        = "limit"
	FieldState        = "state"
	FieldSince        = "since"
	FieldRun          = "run"
	FieldUpcoming     = "upcoming"
	FieldAfter        = "after"
)

// FieldError is input refused before anything was written: Field says which input (one of the
// Field constants), Err why. Its message never quotes an executor spec.
type FieldError struct {
	Field string
	Err   error
}

func (e *FieldError) Error() string { return e.Field + ": " + e.Err.Error() }
func (e *FieldError) Unwrap() error { return e.Err }

func fieldErr(field string, err error) error { return &FieldError{Field: field, Err: err} }

// ErrNotFound means a project, task, trigger or Run named by a command does not exist (or, for a
// publish, the project is archived; for pause or resume, not in the state it changes from).
var ErrNotFound = errors.New("not found")

// stateError is an object in a state the command cannot act on (an archived project paused or
// resumed). It is ErrNotFound to errors.Is, so it exits as one, but its message names the state
// only: "not found" would send the reader looking for a typo.
type stateError struct{ msg string }

func (e *stateError) Error() string        { return e.msg }
func (e *stateError) Is(target error) bool { return target == ErrNotFound }

// ValidateID checks a project, task or trigger identifier against the database's CHECK; field is
// FieldProject, FieldTask or FieldTrigger.
func ValidateID(field, id string) error {
	if err := limits.CheckID(field, id); err != nil {
		return fieldErr(field, err)
	}
	return nil
}

// MaxExecutorSpec bounds an execution spec's size.
const MaxExecutorSpec = limits.MaxExecutorSpec

// ValidateExecutorSpec accepts exactly the JSON objects jsonb stores, up to MaxExecutorSpec bytes.
// Its error names the position and the rule, never the content: a spec may hold secrets.
func ValidateExecutorSpec(spec []byte) error {
	if err := limits.CheckExecutorSpec(spec); err != nil {
		return fieldErr(FieldExecutorSpec, err)
	}
	return nil
}

// fieldErrf is a FieldError with a formatted reason.
func fieldErrf(field, format string, args ...any) error {
	return fieldErr(field, fmt.Errorf(format, args...))
}
