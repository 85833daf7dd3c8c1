package workerproto

import (
	"encoding/json"
	"fmt"
	"os"
	"reflect"
	"regexp"
	"slices"
	"sort"
	"strings"
	"testing"
	"unicode/utf8"
)

// The wire types, by the $defs name docs/dispatch.schema.json gives each.
var wireTypes = map[string]any{
	"RegisterRequest": RegisterRequest{}, "RegisterResponse": RegisterResponse{},
	"PollRequest": PollRequest{}, "PollResponse": PollResponse{}, "Offer": Offer{},
	"AckRequest": AckRequest{}, "AckResponse": AckResponse{},
	"RejectRequest": RejectRequest{}, "RejectResponse": RejectResponse{},
	"LeaseRef": LeaseRef{}, "HeartbeatRequest": HeartbeatRequest{},
	"LeaseStatus": LeaseStatus{}, "HeartbeatResponse": HeartbeatResponse{},
	"AttemptError": AttemptError{}, "CompleteRequest": CompleteRequest{}, "CompleteResponse": CompleteResponse{},
	"DrainRequest": DrainRequest{}, "DrainResponse": DrainResponse{},
	"ErrorBody": ErrorBody{}, "ErrorDetail": ErrorDetail{},
}

type schemaDoc struct {
	Schema string                    `json:"$schema"`
	Defs   map[string]map[string]any `json:"$defs"`
}

func loadSchema(t *testing.T) schemaDoc {
	t.Helper()
	raw, err := os.ReadFile("../docs/dispatch.schema.json")
	if err != nil {
		t.Fatal(err)
	}
	var doc schemaDoc
	if err := json.Unmarshal(raw, &doc); err != nil {
		t.Fatalf("docs/dispatch.schema.json: %v", err)
	}
	if doc.Schema != "https://json-schema.org/draft/2020-12/schema" {
		t.Fatalf("$schema = %q, want JSON Schema 2020-12", doc.Schema)
	}
	return doc
}

type tagInfo struct {
	index     int
	name      string
	omitempty bool
	typ       reflect.Type
}

func jsonFields(t reflect.Type) []tagInfo {
	var out []tagInfo
	for i := range t.NumField() {
		f := t.Field(i)
		tag := f.Tag.Get("json")
		name, opts, _ := strings.Cut(tag, ",")
		if name == "-" || !f.IsExported() {
			continue
		}
		if name == "" {
			name = f.Name
		}
		out = append(out, tagInfo{i, name, strings.Contains(opts, "omitempty"), f.Type})
	}
	return out
}

func keys(m map[string]any) []string {
	out := make([]string, 0, len(m))
	for k := range m {
		out = append(out, k)
	}
	sort.Strings(out)
	return out
}

func strs(v any) []string {
	list, _ := v.([]any)
	out := make([]string, 0, len(list))
	for _, x := range list {
		out = append(out, fmt.Sprint(x))
	}
	return out
}

// Each $defs entry's properties and required equal its Go struct's json tags (required = not
// omitempty); nested wire types are $refs to their own entry; additionalProperties is false.
func TestSchemaMatchesTheGoTypes(t *testing.T) {
	doc := loadSchema(t)
	if got, want := keys(anyMap(doc.Defs)), keys(wireTypes); !slices.Equal(got, want) {
		t.Fatalf("$defs = %v, want one per wire type %v", got, want)
	}
	for name, v := range wireTypes {
		def := doc.Defs[name]
		typ := reflect.TypeOf(v)
		if def["additionalProperties"] != false || def["type"] != "object" {
			t.Errorf("%s: want type object, additionalProperties false", name)
		}
		props, _ := def["properties"].(map[string]any)
		var tags, required []string
		for _, f := range jsonFields(typ) {
			tags = append(tags, f.name)
			if !f.omitempty {
				required = append(required, f.name)
			}
			elem := f.typ
			for elem.Kind() == reflect.Pointer || elem.Kind() == reflect.Slice {
				elem = elem.Elem()
			}
			if _, wire := wireTypes[elem.Name()]; wire && elem.PkgPath() == typ.PkgPath() {
				p, _ := props[f.name].(map[string]any)
				ref := p["$ref"]
				if items, ok := p["items"].(map[string]any); ok {
					ref = items["$ref"]
				}
				if ref != "#/$defs/"+elem.Name() {
					t.Errorf("%s.%s: $ref %v, want #/$defs/%s", name, f.name, ref, elem.Name())
				}
			}
		}
		sort.Strings(tags)
		sort.Strings(required)
		if got := keys(props); !slices.Equal(got, tags) {
			t.Errorf("%s: schema properties %v, Go json tags %v", name, got, tags)
		}
		got := strs(def["required"])
		sort.Strings(got)
		if !slices.Equal(got, required) {
			t.Errorf("%s: schema required %v, Go fields without omitempty %v", name, got, required)
		}
	}
}

func anyMap(m map[string]map[string]any) map[string]any {
	out := map[string]any{}
	for k, v := range m {
		out[k] = v
	}
	return out
}

func prop(t *testing.T, doc schemaDoc, def, name string) map[string]any {
	t.Helper()
	props, _ := doc.Defs[def]["properties"].(map[string]any)
	p, ok := props[name].(map[string]any)
	if !ok {
		t.Fatalf("%s.%s: no such property", def, name)
	}
	return p
}

// The schema's enums and bounds are the Go constants.
func TestSchemaBoundsAreTheConstants(t *testing.T) {
	doc := loadSchema(t)
	for _, c := range []struct {
		def, prop string
		want      []string
	}{
		{"LeaseStatus", "status", LeaseStatuses},
		{"CompleteRequest", "outcome", Outcomes},
		{"AttemptError", "kind", ErrorKinds},
		{"CompleteResponse", "run_state", RunStates},
		{"ErrorDetail", "code", ErrorCodes},
	} {
		if got := strs(prop(t, doc, c.def, c.prop)["enum"]); !slices.Equal(got, c.want) {
			t.Errorf("%s.%s enum = %v, want %v", c.def, c.prop, got, c.want)
		}
	}
	for _, c := range []struct {
		def, prop, key string
		want           any
	}{
		{"RegisterRequest", "name", "pattern", NamePattern},
		{"RegisterRequest", "capacity", "minimum", float64(MinCapacity)},
		{"RegisterRequest", "capacity", "maximum", float64(MaxCapacity)},
		{"RegisterRequest", "labels", "maxProperties", float64(MaxLabels)},
		{"RegisterRequest", "protocol", "const", float64(Version)},
		{"RegisterResponse", "output_tail_max_bytes", "const", float64(OutputTailMaxBytes)},
		{"PollRequest", "wait_ms", "maximum", float64(MaxPollWaitMs)},
		{"PollRequest", "max_offers", "maximum", float64(MaxCapacity)},
		{"HeartbeatRequest", "leases", "maxItems", float64(MaxCapacity)},
		{"RejectRequest", "reason", "maxLength", float64(MaxReasonBytes)},
		{"AttemptError", "message", "maxLength", float64(MaxMessageBytes)},
		{"ErrorDetail", "message", "maxLength", float64(MaxMessageBytes)},
		{"CompleteRequest", "output_tail", "maxLength", float64(OutputTailMaxBytes)},
		{"CompleteRequest", "duration_ms", "maximum", float64(MaxDurationMs)},
	} {
		if got := prop(t, doc, c.def, c.prop)[c.key]; got != c.want {
			t.Errorf("%s.%s %s = %v, want %v", c.def, c.prop, c.key, got, c.want)
		}
	}
	labels := prop(t, doc, "RegisterRequest", "labels")
	if got := labels["propertyNames"].(map[string]any)["pattern"]; got != NamePattern {
		t.Errorf("labels propertyNames pattern = %v, want %s", got, NamePattern)
	}
	if got := labels["additionalProperties"].(map[string]any)["pattern"]; got != LabelValuePattern {
		t.Errorf("labels value pattern = %v, want %s", got, LabelValuePattern)
	}
}

// fill gives every field of v a valid value (a generator: a field added later is filled too).
func fill(v reflect.Value, name string) {
	switch v.Kind() {
	case reflect.Pointer:
		v.Set(reflect.New(v.Type().Elem()))
		fill(v.Elem(), name)
	case reflect.Struct:
		for _, f := range jsonFields(v.Type()) {
			fill(v.Field(f.index), f.name)
		}
	case reflect.Slice:
		if v.Type() == reflect.TypeOf(json.RawMessage(nil)) {
			v.SetBytes([]byte(`{"command":["true"],"timeout":"30s"}`))
			return
		}
		s := reflect.MakeSlice(v.Type(), 1, 1)
		fill(s.Index(0), name)
		v.Set(s)
	case reflect.Map:
		v.Set(reflect.ValueOf(map[string]string{"zone": "eu-1a", "gpu": "true"}))
	case reflect.Bool:
		v.SetBool(true)
	case reflect.Int, reflect.Int64:
		n := map[string]int64{"protocol": Version, "output_tail_max_bytes": OutputTailMaxBytes, "exit_code": 3}[name]
		if n == 0 {
			n = 7
		}
		v.SetInt(n)
	case reflect.String:
		s := map[string]string{
			"name": "w-1", "callback_token": "qlc_AbC-123_xyz", "outcome": OutcomeFailed, "kind": KindExitStatus,
			"status": LeaseCancel, "run_state": RunQueued, "code": CodeLeaseLost, "signal": "SIGKILL",
			"project": "p1", "task": "t1", "trigger": "every-minute", "output_tail": "é…\n",
		}[name]
		if s == "" && strings.HasSuffix(name, "_id") {
			s = "0b7e6a44-8c2f-4e3a-9d51-3c2b1a0f9e77"
		}
		if s == "" {
			s = "some text"
		}
		v.SetString(s)
	default:
		panic(fmt.Sprintf("fill: %s has kind %s", name, v.Kind()))
	}
}

// Every wire type, filled by the generator, marshals to a document its $defs entry accepts, with
// every property present; and the validator refuses what the protocol refuses.
func TestFilledTypesValidate(t *testing.T) {
	doc := loadSchema(t)
	for name, v := range wireTypes {
		p := reflect.New(reflect.TypeOf(v))
		fill(p.Elem(), "")
		raw, err := json.Marshal(p.Interface())
		if err != nil {
			t.Fatal(err)
		}
		var inst map[string]any
		if err := json.Unmarshal(raw, &inst); err != nil {
			t.Fatal(err)
		}
		if got, want := len(inst), len(jsonFields(reflect.TypeOf(v))); got != want {
			t.Errorf("%s: %d properties marshalled, want all %d: %s", name, got, want, raw)
		}
		if err := validate(doc, doc.Defs[name], inst, name); err != nil {
			t.Errorf("%s %s: %v", name, raw, err)
		}
	}
	bad := []struct{ def, doc, why string }{
		{"RegisterRequest", `{"name":"w1","capacity":4,"protocol":1,"extra":1}`, "unknown field"},
		{"RegisterRequest", `{"name":"w1","capacity":257,"protocol":1}`, "capacity"},
		{"RegisterRequest", `{"name":"W1","capacity":1,"protocol":1}`, "name"},
		{"RegisterRequest", `{"name":"w1","capacity":1,"protocol":2}`, "protocol"},
		{"RegisterRequest", `{"capacity":1,"protocol":1}`, "missing name"},
		{"CompleteRequest", `{"session_id":"s","callback_token":"qlc_x","lease_version":1,"outcome":"done","duration_ms":1}`, "outcome"},
		{"CompleteRequest", `{"session_id":"s","callback_token":"qlc_x","lease_version":1,"outcome":"failed","duration_ms":1,"output_tail":"` + strings.Repeat("x", OutputTailMaxBytes+1) + `"}`, "tail"},
		{"HeartbeatRequest", `{"leases":[{"attempt_id":"a","lease_version":0}]}`, "lease version 0"},
		{"ErrorBody", `{"error":{"code":"teapot"}}`, "unknown code"},
	}
	for _, b := range bad {
		var inst any
		if err := json.Unmarshal([]byte(b.doc), &inst); err != nil {
			t.Fatal(err)
		}
		if validate(doc, doc.Defs[b.def], inst, b.def) == nil {
			t.Errorf("%s accepted a document with a bad %s", b.def, b.why)
		}
	}
}

// validate is the subset of JSON Schema 2020-12 that docs/dispatch.schema.json uses (type,
// properties, required, additionalProperties, propertyNames, maxProperties, items, maxItems,
// minimum, maximum, maxLength, pattern, enum, const, $ref); format and descriptions are
// annotations. A full validator would be a dependency for what these dozen keywords need.
func validate(doc schemaDoc, s map[string]any, v any, at string) error {
	known := map[string]bool{"description": true, "format": true, "type": true, "properties": true, "required": true,
		"additionalProperties": true, "propertyNames": true, "maxProperties": true, "items": true, "maxItems": true,
		"minimum": true, "maximum": true, "maxLength": true, "pattern": true, "enum": true, "const": true, "$ref": true}
	for k := range s {
		if !known[k] {
			return fmt.Errorf("%s: schema keyword %q is not supported by this test's validator", at, k)
		}
	}
	if ref, ok := s["$ref"].(string); ok {
		return validate(doc, doc.Defs[strings.TrimPrefix(ref, "#/$defs/")], v, at)
	}
	if c, ok := s["const"]; ok && v != c {
		return fmt.Errorf("%s: %v, want %v", at, v, c)
	}
	if e, ok := s["enum"].([]any); ok && !slices.Contains(e, v) {
		return fmt.Errorf("%s: %v not in %v", at, v, e)
	}
	switch typ, _ := s["type"].(string); typ {
	case "object":
		m, ok := v.(map[string]any)
		if !ok {
			return fmt.Errorf("%s: not an object", at)
		}
		if mx, ok := s["maxProperties"].(float64); ok && float64(len(m)) > mx {
			return fmt.Errorf("%s: %d properties, at most %v", at, len(m), mx)
		}
		for _, r := range strs(s["required"]) {
			if _, ok := m[r]; !ok {
				return fmt.Errorf("%s: %s is required", at, r)
			}
		}
		props, _ := s["properties"].(map[string]any)
		for k, val := range m {
			if pn, ok := s["propertyNames"].(map[string]any); ok {
				if err := validate(doc, pn, k, at+" key"); err != nil {
					return err
				}
			}
			if ps, ok := props[k].(map[string]any); ok {
				if err := validate(doc, ps, val, at+"."+k); err != nil {
					return err
				}
				continue
			}
			switch ap := s["additionalProperties"].(type) {
			case bool:
				if !ap {
					return fmt.Errorf("%s: unknown property %q", at, k)
				}
			case map[string]any:
				if err := validate(doc, ap, val, at+"."+k); err != nil {
					return err
				}
			}
		}
	case "array":
		a, ok := v.([]any)
		if !ok {
			return fmt.Errorf("%s: not an array", at)
		}
		if mx, ok := s["maxItems"].(float64); ok && float64(len(a)) > mx {
			return fmt.Errorf("%s: %d items, at most %v", at, len(a), mx)
		}
		if is, ok := s["items"].(map[string]any); ok {
			for i, x := range a {
				if err := validate(doc, is, x, fmt.Sprintf("%s[%d]", at, i)); err != nil {
					return err
				}
			}
		}
	case "string":
		str, ok := v.(string)
		if !ok {
			return fmt.Errorf("%s: not a string", at)
		}
		if mx, ok := s["maxLength"].(float64); ok && float64(utf8.RuneCountInString(str)) > mx {
			return fmt.Errorf("%s: longer than %v characters", at, mx)
		}
		if p, ok := s["pattern"].(string); ok && !regexp.MustCompile(p).MatchString(str) {
			return fmt.Errorf("%s: does not match %s", at, p)
		}
	case "integer":
		n, ok := v.(float64)
		if !ok || n != float64(int64(n)) {
			return fmt.Errorf("%s: not an integer", at)
		}
		if mn, ok := s["minimum"].(float64); ok && n < mn {
			return fmt.Errorf("%s: %v < %v", at, n, mn)
		}
		if mx, ok := s["maximum"].(float64); ok && n > mx {
			return fmt.Errorf("%s: %v > %v", at, n, mx)
		}
	case "boolean":
		if _, ok := v.(bool); !ok {
			return fmt.Errorf("%s: not a boolean", at)
		}
	case "":
	default:
		return fmt.Errorf("%s: type %q not supported by this test's validator", at, typ)
	}
	return nil
}

// Every fenced block of docs/dispatch.md opened as ```json NAME, NAME a $defs entry, is a
// document that entry accepts: the prose's examples cannot drift from the schema (and, through
// the tests above, from the Go types).
func TestDocExamplesValidate(t *testing.T) {
	doc := loadSchema(t)
	md, err := os.ReadFile("../docs/dispatch.md")
	if os.IsNotExist(err) {
		t.Skip("docs/dispatch.md is not in this tree yet (issue 32 W5 writes it)")
	}
	if err != nil {
		t.Fatal(err)
	}
	fence := regexp.MustCompile("(?ms)^```json ([A-Za-z]+)[ \t]*\n(.*?)^```")
	n := 0
	for _, m := range fence.FindAllStringSubmatch(string(md), -1) {
		name, body := m[1], m[2]
		def, ok := doc.Defs[name]
		if !ok {
			t.Errorf("docs/dispatch.md: block tagged %s, which is no $defs entry", name)
			continue
		}
		n++
		var inst any
		if err := json.Unmarshal([]byte(body), &inst); err != nil {
			t.Errorf("docs/dispatch.md %s block: not JSON: %v", name, err)
			continue
		}
		if err := validate(doc, def, inst, name); err != nil {
			t.Errorf("docs/dispatch.md %s block: %v", name, err)
		}
	}
	if n == 0 {
		t.Fatal("docs/dispatch.md has no ```json <$defs name> block")
	}
}
