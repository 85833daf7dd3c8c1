package admin

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"time"
	"unicode/utf8"

	yaml "go.yaml.in/yaml/v3"

	"github.com/qlcontrol/controlcore/internal/base/limits"
	"github.com/qlcontrol/controlcore/schedule"
)

// SchedulesSchema names the format of a schedules file (`qlsched apply -f`); a file states it in
// its `schema` field.
const SchedulesSchema = "qlsched.schedules/v1"

// MaxSchedulesFile bounds a schedules file's size.
const MaxSchedulesFile = 16 << 20

// Schedules is the desired state a schedules file declares: projects with their tasks and
// triggers. Every field has passed the publisher's own validation.
type Schedules struct {
	File     string
	Projects []ProjectSchedule
}

// ProjectSchedule is one project of a schedules file, with the line it starts on.
type ProjectSchedule struct {
	ID       string
	Line     int
	Tasks    []TaskSchedule
	Triggers []TriggerSchedule
}

// TaskSchedule is a task of a schedules file: its spec (the executor spec as JSON) and line.
type TaskSchedule struct {
	Spec TaskSpec
	Line int
}

// TriggerSchedule is a trigger of a schedules file: its spec and line.
type TriggerSchedule struct {
	Spec TriggerSpec
	Line int
}

// FileError is one fault of a schedules file: where (file, line), which field (a path such as
// projects[billing].triggers[nightly].cron) and why. It never quotes an executor spec.
type FileError struct {
	File  string
	Line  int
	Field string
	Err   error
}

func (e *FileError) Error() string {
	return fmt.Sprintf("%s:%d: %s: %v", e.File, e.Line, e.Field, e.Err)
}

func (e *FileError) Unwrap() error { return e.Err }

// SchedulesError is every fault found in a schedules file, in file order.
type SchedulesError struct {
	File   string
	Errors []*FileError
}

func (e *SchedulesError) Error() string {
	lines := make([]string, 0, len(e.Errors)+1)
	lines = append(lines, fmt.Sprintf("%s: %d error(s)", e.File, len(e.Errors)))
	for _, fe := range e.Errors {
		lines = append(lines, fe.Error())
	}
	return strings.Join(lines, "\n")
}

// Defaults of the optional trigger fields of a schedules file.
const (
	DefaultTimeZone = "UTC"
	DefaultMisfire  = schedule.MisfireSkip
)

// ParseSchedules reads a schedules file (YAML; JSON is YAML too) and validates all of it with the
// publisher's own checks, before anything is sent anywhere. It reports every fault at once, each
// with its line, as a *SchedulesError. Unknown fields are faults; so are duplicate ids, a trigger
// naming a task its project does not declare, and a second YAML document.
//
// The format (docs: README, "Schedules as code"):
//
//	schema: qlsched.schedules/v1
//	projects:
//	  - id: billing
//	    tasks:
//	      - id: invoice
//	        executor_spec: {image: "billing/invoice:1.4"}   # any JSON object
//	        max_attempts: 3          # default 1 (no retries); 1 … 100
//	        retry_backoff: 30s       # before attempt 2, doubled after; default 10s with retries, 0 … 24h
//	        worker_labels: {gpu: "true"}   # a worker must have these labels; at most 16
//	    triggers:
//	      - id: nightly
//	        task: invoice
//	        cron: "0 3 * * *"
//	        timezone: Europe/Berlin   # default UTC
//	        misfire: fire_once        # default skip
//	        misfire_grace: 5m         # a Go duration, 1s to 24h; default 60s
//	        enabled: true             # default true
func ParseSchedules(file string, data []byte) (*Schedules, error) {
	p := &fileParser{file: file}
	out := p.parse(data)
	if len(p.errs) > 0 {
		slices.SortStableFunc(p.errs, func(a, b *FileError) int { return a.Line - b.Line })
		return nil, &SchedulesError{File: file, Errors: p.errs}
	}
	return out, nil
}

type fileParser struct {
	file string
	errs []*FileError
}

func (p *fileParser) errf(n *yaml.Node, field, format string, args ...any) {
	line := 0
	if n != nil {
		line = n.Line
	}
	p.errs = append(p.errs, &FileError{File: p.file, Line: line, Field: field, Err: fmt.Errorf(format, args...)})
}

var yamlLine = regexp.MustCompile(`^yaml: line (\d+): (.*)$`)

// parserQuote is a quoted fragment of the file in a YAML parser message.
var parserQuote = regexp.MustCompile("'[^']*'|`[^`]*`|\"[^\"]*\"")

// coreTags are YAML's own tags without a JSON form: safe to name, unlike a tag the file made up,
// which may be a piece of an executor spec (password: !Sup3rS3cret).
var coreTags = map[string]bool{"!!binary": true, "!!merge": true, "!!omap": true, "!!pairs": true, "!!set": true}

func (p *fileParser) parse(data []byte) *Schedules {
	if len(data) > MaxSchedulesFile {
		p.errs = append(p.errs, &FileError{File: p.file, Line: 1, Field: "file", Err: fmt.Errorf("%d bytes: want at most %d", len(data), MaxSchedulesFile)})
		return nil
	}
	if line, ok := invalidUTF8(data); ok { // the parser says only "invalid … octet", at line 1
		p.errs = append(p.errs, &FileError{File: p.file, Line: line, Field: "file", Err: errors.New("not valid UTF-8: want a UTF-8 (or BOM-marked UTF-16) file")})
		return nil
	}
	dec := yaml.NewDecoder(bytes.NewReader(data))
	var doc yaml.Node
	if err := dec.Decode(&doc); err != nil {
		if errors.Is(err, io.EOF) {
			p.errs = append(p.errs, &FileError{File: p.file, Line: 1, Field: "file", Err: errors.New("empty: want a document with schema and projects")})
			return nil
		}
		line, msg := 1, strings.TrimPrefix(err.Error(), "yaml: ")
		if m := yamlLine.FindStringSubmatch(err.Error()); m != nil {
			line, _ = strconv.Atoi(m[1])
			msg = m[2]
		}
		// the parser quotes what it read ("unknown anchor 'x' referenced"), which may be a piece
		// of an executor spec: never shown
		msg = parserQuote.ReplaceAllString(msg, "(not shown)")
		p.errs = append(p.errs, &FileError{File: p.file, Line: line, Field: "syntax", Err: errors.New(msg)})
		return nil
	}
	var second yaml.Node
	if err := dec.Decode(&second); !errors.Is(err, io.EOF) {
		line := bytes.Count(data, []byte("\n")) + 1 // a second document that does not parse: the end
		if m := yamlLine.FindStringSubmatch(fmt.Sprint(err)); m != nil {
			line, _ = strconv.Atoi(m[1])
		} else if err == nil {
			line = second.Line
		}
		p.errs = append(p.errs, &FileError{File: p.file, Line: line, Field: "file", Err: errors.New("a second YAML document: want exactly one")})
	}
	if len(doc.Content) == 0 {
		p.errs = append(p.errs, &FileError{File: p.file, Line: 1, Field: "file", Err: errors.New("empty: want a document with schema and projects")})
		return nil
	}
	root := doc.Content[0]
	top := p.mapping(root, "", "schema", "projects")
	if top == nil {
		return nil
	}
	if n, ok := top["schema"]; !ok {
		p.errf(root, "schema", "missing: want %q", SchedulesSchema)
	} else if s, ok := p.str(n, "schema"); ok && s != SchedulesSchema {
		p.errf(n, "schema", "%s: want %q", quoteField(s), SchedulesSchema)
	}
	out := &Schedules{File: p.file}
	projects, ok := top["projects"]
	if !ok {
		p.errf(root, "projects", "missing: want a list of projects")
		return out
	}
	seen := map[string]int{}
	items := p.seq(projects, "projects")
	for i, pn := range items {
		if ps, ok := p.project(pn, i, seen); ok {
			out.Projects = append(out.Projects, ps)
		}
	}
	if r := resolve(projects); len(items) == 0 && (r.Kind == yaml.SequenceNode || r.Tag == "!!null") {
		p.errf(projects, "projects", "empty: want at least one project")
	}
	return out
}

func (p *fileParser) project(n *yaml.Node, i int, seen map[string]int) (ProjectSchedule, bool) {
	path := named(n, fmt.Sprintf("projects[%d]", i), "projects", FieldProject)
	m := p.mapping(n, path, "id", "tasks", "triggers")
	if m == nil {
		return ProjectSchedule{}, false
	}
	ps := ProjectSchedule{Line: resolve(n).Line}
	ps.ID = p.id(m, n, path, FieldProject, seen)
	tasks := map[string]int{}
	if tn, ok := m["tasks"]; ok {
		for j, x := range p.seq(tn, path+".tasks") {
			if ts, ok := p.task(x, j, path, ps.ID, tasks); ok {
				ps.Tasks = append(ps.Tasks, ts)
			}
		}
	}
	triggers := map[string]int{}
	if tn, ok := m["triggers"]; ok {
		for j, x := range p.seq(tn, path+".triggers") {
			if ts, ok := p.trigger(x, j, path, ps.ID, tasks, triggers); ok {
				ps.Triggers = append(ps.Triggers, ts)
			}
		}
	}
	return ps, true
}

// named is an item's path named by its id (projects[billing]) when the item has a valid one,
// else by its index (projects[0]), so that every fault of the item, its unknown fields included,
// names it the same way.
func named(n *yaml.Node, path, list, field string) string {
	n = resolve(n)
	if n == nil || n.Kind != yaml.MappingNode {
		return path
	}
	for i := 0; i+1 < len(n.Content); i += 2 {
		k, v := resolve(n.Content[i]), resolve(n.Content[i+1])
		if k.Value == "id" && v.Kind == yaml.ScalarNode && ValidateID(field, v.Value) == nil {
			prefix := ""
			if i := strings.LastIndex(path, "."); i >= 0 {
				prefix = path[:i+1]
			}
			return fmt.Sprintf("%s%s[%s]", prefix, list, v.Value)
		}
	}
	return path
}

// id reads the id field of an item and checks it with ValidateID and for duplicates among seen.
func (p *fileParser) id(m map[string]*yaml.Node, item *yaml.Node, path, field string, seen map[string]int) string {
	n, ok := m["id"]
	if !ok {
		p.errf(item, path+".id", "missing")
		return ""
	}
	id, ok := p.str(n, path+".id")
	if !ok {
		return ""
	}
	if err := ValidateID(field, id); err != nil {
		p.errf(n, path+".id", "%v", unwrapField(err))
		return ""
	}
	if line, dup := seen[id]; dup {
		p.errf(n, path+".id", "duplicate: also at line %d", line)
		return ""
	}
	seen[id] = n.Line
	return id
}

func (p *fileParser) task(n *yaml.Node, j int, parent, project string, seen map[string]int) (TaskSchedule, bool) {
	path := named(n, fmt.Sprintf("%s.tasks[%d]", parent, j), "tasks", FieldTask)
	m := p.mapping(n, path, "id", "executor_spec", "max_attempts", "retry_backoff", "worker_labels")
	if m == nil {
		return TaskSchedule{}, false
	}
	ts := TaskSchedule{Line: resolve(n).Line}
	var ok bool
	ts.Spec.Project = project
	ts.Spec.Task = p.id(m, n, path, FieldTask, seen)
	spec, found := m["executor_spec"]
	if !found {
		p.errf(n, path+".executor_spec", "missing: want a JSON object")
		return ts, false
	}
	if ts.Spec.ExecutorSpec, ok = p.specJSON(spec, path+".executor_spec"); !ok {
		return ts, false
	}
	if err := ValidateExecutorSpec(ts.Spec.ExecutorSpec); err != nil {
		p.errf(spec, path+".executor_spec", "in its JSON form: %v", unwrapField(err))
		return ts, false
	}
	if !p.taskPolicy(m, n, path, &ts.Spec) {
		return ts, false
	}
	return ts, ts.Spec.Task != "" && project != ""
}

// taskPolicy reads a task's optional retry policy and selector (max_attempts: an integer,
// retry_backoff: a Go duration, worker_labels: a mapping of strings) and checks them with the
// publisher's own rules, the fault named by the key it comes from.
func (p *fileParser) taskPolicy(m map[string]*yaml.Node, item *yaml.Node, path string, t *TaskSpec) bool {
	ok := true
	if v, found := m["max_attempts"]; found {
		v = resolve(v)
		n, err := strconv.Atoi(v.Value)
		if v.Kind != yaml.ScalarNode || v.Tag != "!!int" || err != nil {
			p.errf(v, path+".max_attempts", "want an integer, 1 … %d", MaxMaxAttempts)
			ok = false
		} else if n < 1 { // 0 would read as "the default" in a TaskSpec
			p.errf(v, path+".max_attempts", "%d is out of range: want 1 … %d", n, MaxMaxAttempts)
			ok = false
		} else {
			t.MaxAttempts = n
		}
	}
	if v, found := m["retry_backoff"]; found {
		if s, good := p.str(v, path+".retry_backoff"); !good {
			ok = false
		} else if d, err := time.ParseDuration(s); err != nil {
			p.errf(resolve(v), path+".retry_backoff", "%s is not a duration: want one such as 10s or 5m", quoteField(s))
			ok = false
		} else {
			t.RetryBackoff = &d
		}
	}
	if v, found := m["worker_labels"]; found {
		r := resolve(v)
		if r.Kind != yaml.MappingNode {
			p.errf(r, path+".worker_labels", "want a mapping of label keys to values, got %s", kindOf(r))
			ok = false
		} else {
			t.WorkerLabels = map[string]string{}
			for i := 0; i+1 < len(r.Content); i += 2 {
				k, val := resolve(r.Content[i]), resolve(r.Content[i+1])
				if k.Kind != yaml.ScalarNode || val.Kind != yaml.ScalarNode || val.Tag == "!!null" {
					p.errf(k, path+".worker_labels", "want key: value, both strings")
					ok = false
					continue
				}
				if _, dup := t.WorkerLabels[k.Value]; dup {
					p.errf(k, path+".worker_labels", "duplicate key %s", quoteField(k.Value))
					ok = false
					continue
				}
				t.WorkerLabels[k.Value] = val.Value
			}
		}
	}
	if !ok {
		return false
	}
	if _, err := t.policy(); err != nil {
		key := "worker_labels"
		var fe *FieldError
		if errors.As(err, &fe) && fe.Field != FieldWorkerLabel {
			key = fe.Field // max_attempts, retry_backoff: the file's keys
		}
		p.errf(lineOf(m, key, item), path+"."+key, "%v", unwrapField(err))
		return false
	}
	return true
}

// triggerFields are the keys of a trigger and the FieldError field each one is checked as.
var triggerFields = map[string]string{
	"id": FieldTrigger, "task": FieldTask, "cron": FieldCron, "timezone": FieldTimeZone, "misfire": FieldMisfire,
	"misfire_grace": FieldMisfireGrace, "enabled": "",
}

func (p *fileParser) trigger(n *yaml.Node, j int, parent, project string, tasks, seen map[string]int) (TriggerSchedule, bool) {
	path := named(n, fmt.Sprintf("%s.triggers[%d]", parent, j), "triggers", FieldTrigger)
	m := p.mapping(n, path, "id", "task", "cron", "timezone", "misfire", "misfire_grace", "enabled")
	if m == nil {
		return TriggerSchedule{}, false
	}
	ts := TriggerSchedule{Line: resolve(n).Line}
	t := TriggerSpec{Project: project, TimeZone: DefaultTimeZone, Misfire: DefaultMisfire, MisfireGrace: schedule.DefaultMisfireGrace, Enabled: true}
	t.Trigger = p.id(m, n, path, FieldTrigger, seen)
	ok := t.Trigger != ""
	unread := map[string]bool{} // given, but not as a string: reported already
	for _, f := range []struct {
		key string
		to  *string
	}{{"task", &t.Task}, {"cron", &t.Cron}, {"timezone", &t.TimeZone}} {
		v, found := m[f.key]
		if !found {
			if f.key != "timezone" {
				p.errf(n, path+"."+f.key, "missing")
				ok = false
			}
			continue
		}
		s, good := p.str(v, path+"."+f.key)
		*f.to, ok, unread[f.key] = s, ok && good, !good
	}
	if v, found := m["misfire"]; found {
		s, good := p.str(v, path+".misfire")
		t.Misfire, ok, unread["misfire"] = schedule.MisfirePolicy(s), ok && good, !good
	}
	if v, found := m["misfire_grace"]; found {
		// a Go duration string ("60s", "5m"), checked as the publisher checks a given grace (0
		// included: in a file it is a value, not "the default")
		if s, good := p.str(v, path+".misfire_grace"); !good {
			ok = false
		} else if g, err := time.ParseDuration(s); err != nil {
			p.errf(resolve(v), path+".misfire_grace", "%s is not a duration: want one such as 60s or 5m", quoteField(s))
			ok = false
		} else if err := schedule.CheckMisfireGrace(g); err != nil {
			p.errf(resolve(v), path+".misfire_grace", "%v", err)
			ok = false
		} else {
			t.MisfireGrace = g
		}
	}
	if v, found := m["enabled"]; found {
		v = resolve(v)
		b, err := strconv.ParseBool(v.Value) // a !!bool is true, True, TRUE, false …
		if v.Kind != yaml.ScalarNode || v.Tag != "!!bool" || err != nil {
			p.errf(v, path+".enabled", "want true or false")
			ok = false
		} else {
			t.Enabled = b
		}
	}
	// The publisher's own checks, each field on its own (the others set to values that pass), so
	// that several faults of one trigger are all reported; then the whole spec, for a fault only
	// the combination has (a spec that names no time in its zone).
	good := TriggerSpec{Project: "p", Trigger: "t", Task: "k", Cron: "* * * * *", TimeZone: "UTC", Misfire: schedule.MisfireSkip}
	faults := 0
	for _, f := range []struct {
		key   string
		probe func(*TriggerSpec)
	}{
		{"task", func(s *TriggerSpec) { s.Task = t.Task }},
		{"cron", func(s *TriggerSpec) { s.Cron = t.Cron }},
		{"timezone", func(s *TriggerSpec) { s.TimeZone = t.TimeZone }},
		{"misfire", func(s *TriggerSpec) { s.Misfire = t.Misfire }},
	} {
		if _, given := m[f.key]; (!given && f.key != "misfire" && f.key != "timezone") || unread[f.key] {
			continue // reported as missing, or as not a string
		}
		probe := good
		f.probe(&probe)
		if err := probe.Validate(); err != nil {
			p.errf(lineOf(m, f.key, n), path+"."+f.key, "%v", unwrapField(err))
			faults++
		} else if f.key == "task" {
			if _, declared := tasks[t.Task]; !declared {
				p.errf(lineOf(m, "task", n), path+".task", "%s is not a task of this project in this file", quoteField(t.Task))
				faults++
			}
		}
	}
	if faults == 0 && ok {
		if err := t.Validate(); err != nil {
			var fe *FieldError
			key := "cron"
			if errors.As(err, &fe) {
				key = keyOf(fe.Field)
			}
			p.errf(lineOf(m, key, n), path+"."+key, "%v", unwrapField(err))
			faults++
		}
	}
	ts.Spec = t
	return ts, ok && faults == 0 && project != ""
}

// keyOf is the trigger key a FieldError's field is given by.
func keyOf(field string) string {
	for key, f := range triggerFields {
		if f == field {
			return key
		}
	}
	return field
}

// lineOf is the node of key in m, else the item's node (for its line).
func lineOf(m map[string]*yaml.Node, key string, item *yaml.Node) *yaml.Node {
	if n, ok := m[key]; ok {
		return n
	}
	return item
}

// unwrapField is a FieldError's reason alone: the file names the field by its path.
func unwrapField(err error) error {
	var fe *FieldError
	if errors.As(err, &fe) {
		return fe.Err
	}
	return err
}

// resolve follows aliases and documents to the node they stand for.
func resolve(n *yaml.Node) *yaml.Node {
	for n != nil && (n.Kind == yaml.AliasNode || n.Kind == yaml.DocumentNode) {
		if n.Kind == yaml.AliasNode {
			n = n.Alias
		} else if len(n.Content) > 0 {
			n = n.Content[0]
		} else {
			return n
		}
	}
	return n
}

// mapping returns the keys of a mapping node, reporting any key not in allowed (unknown fields
// are faults), duplicate keys, and a node that is not a mapping. nil: not a mapping.
func (p *fileParser) mapping(n *yaml.Node, path string, allowed ...string) map[string]*yaml.Node {
	n = resolve(n)
	field := path
	if field == "" {
		field = "file"
	}
	if n == nil || n.Kind != yaml.MappingNode {
		p.errf(n, field, "want a mapping of %s, got %s", strings.Join(allowed, ", "), kindOf(n))
		return nil
	}
	out := map[string]*yaml.Node{}
	for i := 0; i+1 < len(n.Content); i += 2 {
		k, v := resolve(n.Content[i]), n.Content[i+1]
		name := join(path, k.Value)
		if k.Kind != yaml.ScalarNode {
			p.errf(k, field, "a key that is not a string")
			continue
		}
		if _, dup := out[k.Value]; dup {
			p.errf(k, name, "duplicate key: also at line %d", out[k.Value].Line)
			continue
		}
		known := false
		for _, a := range allowed {
			known = known || a == k.Value
		}
		if !known {
			p.errf(k, name, "unknown field: want one of %s", strings.Join(allowed, ", "))
			continue
		}
		out[k.Value] = v
	}
	return out
}

func join(path, key string) string {
	if path == "" {
		return key
	}
	return path + "." + key
}

// seq returns the items of a sequence node; field "" reports nothing.
func (p *fileParser) seq(n *yaml.Node, field string) []*yaml.Node {
	n = resolve(n)
	if n.Kind == yaml.ScalarNode && n.Tag == "!!null" {
		return nil // "tasks:" with nothing after it: an empty list
	}
	if n.Kind != yaml.SequenceNode {
		if field != "" {
			p.errf(n, field, "want a list, got %s", kindOf(n))
		}
		return nil
	}
	return n.Content
}

// str returns a scalar's text; a mapping, a list or null is a fault.
func (p *fileParser) str(n *yaml.Node, field string) (string, bool) {
	n = resolve(n)
	if n.Kind != yaml.ScalarNode || n.Tag == "!!null" {
		p.errf(n, field, "want a string, got %s", kindOf(n))
		return "", false
	}
	return n.Value, true
}

func kindOf(n *yaml.Node) string {
	switch {
	case n == nil || n.Kind == 0:
		return "nothing"
	case n.Kind == yaml.MappingNode:
		return "a mapping"
	case n.Kind == yaml.SequenceNode:
		return "a list"
	case n.Tag == "!!null":
		return "null"
	case !strings.HasPrefix(n.Tag, "!!"): // a tag the file made up: may be a piece of a secret
		return "a scalar"
	}
	return "a scalar (" + strings.TrimPrefix(n.Tag, "!!") + ")"
}

// quoteField quotes a short field value of the file (never an executor spec).
func quoteField(s string) string {
	if len(s) > 80 {
		return fmt.Sprintf("(%d characters)", len(s))
	}
	return strconv.Quote(s)
}

var jsonNumber = regexp.MustCompile(`^-?(0|[1-9][0-9]*)(\.[0-9]+)?([eE][+-]?[0-9]+)?$`)

// specJSON renders an executor spec given as YAML (or JSON) as JSON, keeping the order of keys
// (PostgreSQL's jsonb sorts them when it stores the spec, and its digest is of that form). A
// scalar JSON cannot represent (.inf, a binary, a merge key) is a fault named by its line and
// rule, never by its content. Aliases are followed, up to the size and depth bounds.
func (p *fileParser) specJSON(n *yaml.Node, field string) ([]byte, bool) {
	if r := resolve(n); r.Kind != yaml.MappingNode {
		p.errf(r, field, "want a JSON object, got %s", kindOf(r))
		return nil, false
	}
	var buf bytes.Buffer
	bad := p.writeJSON(&buf, n, field, 0)
	return buf.Bytes(), !bad
}

func (p *fileParser) writeJSON(buf *bytes.Buffer, n *yaml.Node, field string, depth int) (bad bool) {
	if depth > limits.MaxSpecDepth || buf.Len() > MaxExecutorSpec {
		p.errf(n, field, "more than %d levels deep or %d bytes as JSON", limits.MaxSpecDepth, MaxExecutorSpec)
		return true
	}
	at := n
	n = resolve(n)
	switch n.Kind {
	case yaml.MappingNode:
		buf.WriteByte('{')
		keys := map[string]bool{}
		for i := 0; i+1 < len(n.Content); i += 2 {
			k := resolve(n.Content[i])
			if k.Kind != yaml.ScalarNode || k.Tag == "!!merge" {
				p.errf(k, field, "a key that is not a string (merge keys and complex keys have no JSON form)")
				return true
			}
			if keys[k.Value] {
				p.errf(k, field, "a duplicate key")
				return true
			}
			keys[k.Value] = true
			if i > 0 {
				buf.WriteByte(',')
			}
			writeString(buf, k.Value)
			buf.WriteByte(':')
			if p.writeJSON(buf, n.Content[i+1], field, depth+1) {
				return true
			}
		}
		buf.WriteByte('}')
	case yaml.SequenceNode:
		buf.WriteByte('[')
		for i, x := range n.Content {
			if i > 0 {
				buf.WriteByte(',')
			}
			if p.writeJSON(buf, x, field, depth+1) {
				return true
			}
		}
		buf.WriteByte(']')
	case yaml.ScalarNode:
		switch n.Tag {
		case "!!null":
			buf.WriteString("null")
		case "!!bool": // True, TRUE, and yes or on under an explicit !!bool: JSON has one spelling
			b, ok := yamlBools[strings.ToLower(n.Value)]
			if !ok {
				p.errf(n, field, "a !!bool that is neither true nor false; write true or false")
				return true
			}
			buf.WriteString(strconv.FormatBool(b))
		case "!!int", "!!float":
			switch v := strings.ReplaceAll(n.Value, "_", ""); {
			case jsonNumber.MatchString(n.Value):
				buf.WriteString(n.Value)
			case n.Tag == "!!int":
				i, err := strconv.ParseInt(v, 0, 64)
				if err != nil {
					p.errf(n, field, "an integer JSON cannot represent")
					return true
				}
				buf.WriteString(strconv.FormatInt(i, 10))
			default:
				p.errf(n, field, "a number JSON cannot represent (infinity, NaN, or not in JSON's notation)")
				return true
			}
		case "!!str", "!!timestamp":
			writeString(buf, n.Value)
		default:
			if coreTags[n.Tag] {
				p.errf(n, field, "a value of YAML type %s, which has no JSON form", n.Tag)
			} else {
				p.errf(n, field, "a value with a YAML tag of its own (not shown: it may be part of a secret), which has no JSON form; quote it")
			}
			return true
		}
	default:
		p.errf(at, field, "%s has no JSON form", kindOf(n))
		return true
	}
	return false
}

// invalidUTF8 returns the line of the first byte that is not UTF-8, unless a byte-order mark says
// the file is UTF-16 (which the parser reads).
func invalidUTF8(data []byte) (line int, found bool) {
	if bytes.HasPrefix(data, []byte{0xfe, 0xff}) || bytes.HasPrefix(data, []byte{0xff, 0xfe}) || utf8.Valid(data) {
		return 0, false
	}
	for i := 0; i < len(data); {
		r, size := utf8.DecodeRune(data[i:])
		if r == utf8.RuneError && size == 1 {
			return bytes.Count(data[:i], []byte("\n")) + 1, true
		}
		i += size
	}
	return 1, true // unreachable: utf8.Valid said there is one
}

// yamlBools are the spellings of a boolean in YAML 1.2 (true, True, TRUE …) and, under an explicit
// !!bool tag, in YAML 1.1 (yes, no, on, off, y, n), lower-cased.
var yamlBools = map[string]bool{"true": true, "yes": true, "on": true, "y": true,
	"false": false, "no": false, "off": false, "n": false}

func writeString(buf *bytes.Buffer, s string) {
	enc := json.NewEncoder(buf)
	enc.SetEscapeHTML(false)
	_ = enc.Encode(s) // a string always encodes
	buf.Truncate(buf.Len() - 1)
}
