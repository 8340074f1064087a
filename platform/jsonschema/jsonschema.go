// Package jsonschema is the JSON Schema validator every service uses: the
// agent for tool arguments, the gateway for tool definitions and for replies
// held to a response format. It wraps github.com/santhosh-tekuri/jsonschema/v6
// (draft 2020-12 by default, every keyword: $ref to #/$defs and
// #/definitions, oneOf, anyOf, allOf, not, const, the length, item, value
// and property bounds, pattern, ...) and turns its error tree into one line
// a model can act on: where, and what is wrong.
//
// Schemas are self-contained: a $ref to anything outside the document is
// refused at Compile, so a schema from a caller never makes the service
// fetch a URL or read a file.
package jsonschema

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"math/big"
	"slices"
	"strconv"
	"strings"
	"sync"

	js "github.com/santhosh-tekuri/jsonschema/v6"
	"github.com/santhosh-tekuri/jsonschema/v6/kind"
	"golang.org/x/text/language"
	"golang.org/x/text/message"
)

// Schema is a compiled schema, safe for concurrent use.
type Schema struct {
	compiled *js.Schema
	doc      any // the decoded document, for the property names an error lists
}

// location is where a compiled document lives; never loaded from.
const location = "mem:///schema.json"

// noLoader refuses every $ref outside the document.
type noLoader struct{}

func (noLoader) Load(url string) (any, error) {
	return nil, fmt.Errorf("$ref %s: only references inside the schema (#/$defs/..., #/definitions/...) are allowed", url)
}

// Compile parses and compiles a schema document (JSON text).
func Compile(text []byte) (*Schema, error) {
	doc, err := Decode(text)
	if err != nil {
		return nil, fmt.Errorf("not valid JSON: %w", err)
	}
	return CompileValue(doc)
}

// CompileValue compiles a decoded schema document (from Decode, or any
// value encoding/json produces).
func CompileValue(doc any) (*Schema, error) {
	c := js.NewCompiler()
	c.DefaultDraft(js.Draft2020)
	c.UseLoader(noLoader{})
	if err := c.AddResource(location, doc); err != nil {
		return nil, err
	}
	s, err := c.Compile(location)
	if err != nil {
		return nil, compileError(err, doc)
	}
	return &Schema{compiled: s, doc: doc}, nil
}

// compileError shortens the library's error: the metaschema's verdict
// without its URLs, or the message as it is.
func compileError(err error, doc any) error {
	var sve *js.SchemaValidationError
	if errors.As(err, &sve) {
		var ve *js.ValidationError
		if errors.As(sve.Err, &ve) {
			leaf := firstLeaf(ve)
			return fmt.Errorf("not a valid JSON Schema: %s: %s", path("schema", leaf.InstanceLocation), describe(leaf, "schema", doc, nil))
		}
	}
	return errors.New(strings.ReplaceAll(err.Error(), location, "schema"))
}

// Compiling checks the document against its draft's metaschema, which
// costs hundreds of microseconds; the services see the same few schemas
// (the agent's tools, on every turn) again and again, so they compile
// through a bounded cache keyed by the text.
const (
	cacheEntries = 512
	cacheMaxText = 64 << 10 // larger schemas are compiled every time
)

var cache = struct {
	sync.Mutex
	m     map[string]*Schema
	order []string // insertion order, for eviction
}{m: map[string]*Schema{}}

// CompileCached is Compile through a process-wide cache of the last 512
// schemas that compiled (a *Schema is immutable and shared).
func CompileCached(text []byte) (*Schema, error) {
	if len(text) > cacheMaxText {
		return Compile(text)
	}
	cache.Lock()
	s, ok := cache.m[string(text)]
	cache.Unlock()
	if ok {
		return s, nil
	}
	s, err := Compile(text)
	if err != nil {
		return nil, err
	}
	cache.Lock()
	defer cache.Unlock()
	if prev, ok := cache.m[string(text)]; ok {
		return prev, nil
	}
	if len(cache.order) >= cacheEntries {
		delete(cache.m, cache.order[0])
		cache.order = cache.order[1:]
	}
	key := string(text)
	cache.m[key] = s
	cache.order = append(cache.order, key)
	return s, nil
}

// MustCompileCached is CompileCached for schemas the program itself
// defines (the agent's built-in tools): it panics when text does not
// compile.
func MustCompileCached(text string) *Schema {
	s, err := CompileCached([]byte(text))
	if err != nil {
		panic(fmt.Sprintf("jsonschema: built-in schema does not compile: %v\n%s", err, text))
	}
	return s
}

// Types lists the schema's top-level "type" ("object", or several); nil
// when it has none.
func (s *Schema) Types() []string {
	if s.compiled.Types == nil {
		return nil
	}
	return s.compiled.Types.ToStrings()
}

// Decode parses one JSON value with numbers as json.Number (what Validate
// expects) and fails on anything after it.
func Decode(text []byte) (any, error) {
	dec := json.NewDecoder(bytes.NewReader(text))
	dec.UseNumber()
	var v any
	if err := dec.Decode(&v); err != nil {
		return nil, err
	}
	if _, err := dec.Token(); !errors.Is(err, io.EOF) {
		return nil, errors.New("extra data after the value")
	}
	return v, nil
}

// Error is a value that does not match its schema: the first problem, as
// a path from the root the caller named ("arguments", "reply") and a
// reason; More counts the other problems found.
type Error struct {
	Path   string // e.g. arguments.plan[0].status
	Reason string // e.g. "done" is not one of pending, in_progress, completed
	More   int
}

func (e *Error) Error() string {
	s := e.Path + ": " + e.Reason
	if e.More > 0 {
		s += fmt.Sprintf(" (and %d more problem%s)", e.More, plural(e.More))
	}
	return s
}

// Validate checks a decoded value (numbers as json.Number, see Decode)
// against the schema. root names the value in the error's path. The error
// is an *Error.
func (s *Schema) Validate(v any, root string) error {
	err := s.compiled.Validate(v)
	if err == nil {
		return nil
	}
	var ve *js.ValidationError
	if !errors.As(err, &ve) {
		return &Error{Path: root, Reason: err.Error()}
	}
	leaves := 0
	countLeaves(ve, &leaves)
	first := firstLeaf(ve)
	return &Error{Path: path(root, first.InstanceLocation), Reason: describe(first, root, v, s.doc), More: leaves - 1}
}

// ValidateJSON decodes text and validates it; it returns the decoded value.
func (s *Schema) ValidateJSON(text []byte, root string) (any, error) {
	v, err := Decode(text)
	if err != nil {
		return nil, &Error{Path: root, Reason: "not valid JSON: " + err.Error()}
	}
	return v, s.Validate(v, root)
}

// structural kinds only gather their causes.
func structural(k js.ErrorKind) bool {
	switch k.(type) {
	case *kind.Schema, *kind.Group, *kind.AllOf, *kind.Reference:
		return true
	}
	return false
}

// firstLeaf follows the first cause (in instance order) down to the
// problem to report. anyOf, oneOf (none matched) and not stop there: no
// branch is more the model's intent than another.
func firstLeaf(e *js.ValidationError) *js.ValidationError {
	for len(e.Causes) > 0 && structural(e.ErrorKind) {
		causes := slices.Clone(e.Causes)
		slices.SortStableFunc(causes, func(a, b *js.ValidationError) int {
			return slices.Compare(a.InstanceLocation, b.InstanceLocation)
		})
		e = causes[0]
	}
	return e
}

func countLeaves(e *js.ValidationError, n *int) {
	if len(e.Causes) == 0 || !structural(e.ErrorKind) {
		*n++
		return
	}
	for _, c := range e.Causes {
		countLeaves(c, n)
	}
}

var printer = message.NewPrinter(language.English)

// describe says what is wrong at e, in the words of the tool errors a
// model reads: "expected string, got number", `missing required property
// "x"`, ...
func describe(e *js.ValidationError, root string, instance, doc any) string {
	got := valueAt(instance, e.InstanceLocation)
	switch k := e.ErrorKind.(type) {
	case *kind.Type:
		return fmt.Sprintf("expected %s, got %s", strings.Join(k.Want, " or "), kindOf(got))
	case *kind.Required:
		return fmt.Sprintf("missing required property %q", k.Missing[0])
	case *kind.AdditionalProperties:
		msg := fmt.Sprintf("unknown property %q", k.Properties[0])
		if names := propertyNames(doc, e.SchemaURL); len(names) > 0 {
			msg += " (allowed: " + strings.Join(names, ", ") + ")"
		}
		return msg
	case *kind.Enum:
		want := make([]string, len(k.Want))
		for i, w := range k.Want {
			if s, ok := w.(string); ok {
				want[i] = s
			} else {
				want[i] = jsonText(w)
			}
		}
		return fmt.Sprintf("%s is not one of %s", quoted(got), strings.Join(want, ", "))
	case *kind.Const:
		return fmt.Sprintf("must be %s, got %s", jsonText(k.Want), quoted(got))
	case *kind.Minimum:
		return fmt.Sprintf("must be at least %s, got %s", rat(k.Want), jsonText(got))
	case *kind.Maximum:
		return fmt.Sprintf("must be at most %s, got %s", rat(k.Want), jsonText(got))
	case *kind.ExclusiveMinimum:
		return fmt.Sprintf("must be greater than %s, got %s", rat(k.Want), jsonText(got))
	case *kind.ExclusiveMaximum:
		return fmt.Sprintf("must be less than %s, got %s", rat(k.Want), jsonText(got))
	case *kind.MultipleOf:
		return fmt.Sprintf("must be a multiple of %s, got %s", rat(k.Want), jsonText(got))
	case *kind.MinLength:
		return fmt.Sprintf("must be at least %d character%s long, got %d", k.Want, plural(k.Want), k.Got)
	case *kind.MaxLength:
		return fmt.Sprintf("must be at most %d character%s long, got %d", k.Want, plural(k.Want), k.Got)
	case *kind.MinItems:
		return fmt.Sprintf("must have at least %d item%s, got %d", k.Want, plural(k.Want), k.Got)
	case *kind.MaxItems:
		return fmt.Sprintf("must have at most %d item%s, got %d", k.Want, plural(k.Want), k.Got)
	case *kind.MinProperties:
		return fmt.Sprintf("must have at least %d propert%s, got %d", k.Want, ies(k.Want), k.Got)
	case *kind.MaxProperties:
		return fmt.Sprintf("must have at most %d propert%s, got %d", k.Want, ies(k.Want), k.Got)
	case *kind.Pattern:
		return fmt.Sprintf("%q does not match the pattern %s", k.Got, k.Want)
	case *kind.UniqueItems:
		return fmt.Sprintf("items %d and %d are equal; items must be unique", k.Duplicates[0], k.Duplicates[1])
	case *kind.FalseSchema:
		return "no value is allowed here"
	case *kind.Not:
		return "must not match the schema under \"not\""
	case *kind.AnyOf:
		return "matches none of anyOf" + firstBranch(e, root, instance, doc)
	case *kind.OneOf:
		if len(k.Subschemas) == 0 {
			return "matches none of oneOf" + firstBranch(e, root, instance, doc)
		}
		return fmt.Sprintf("matches more than one of oneOf (alternatives %d and %d); it must match exactly one", k.Subschemas[0], k.Subschemas[1])
	}
	return e.ErrorKind.LocalizedString(printer)
}

// firstBranch describes why the first alternative of an anyOf or oneOf
// failed.
func firstBranch(e *js.ValidationError, root string, instance, doc any) string {
	if len(e.Causes) == 0 {
		return ""
	}
	leaf := firstLeaf(e.Causes[0])
	return fmt.Sprintf(" (the first alternative: %s: %s)", path(root, leaf.InstanceLocation), describe(leaf, root, instance, doc))
}

// path renders an instance location: root.name[3].other.
func path(root string, loc []string) string {
	var b strings.Builder
	b.WriteString(root)
	for _, p := range loc {
		if _, err := strconv.Atoi(p); err == nil {
			b.WriteString("[" + p + "]")
		} else {
			b.WriteString("." + p)
		}
	}
	return b.String()
}

// valueAt is the value at an instance location.
func valueAt(v any, loc []string) any {
	for _, p := range loc {
		switch c := v.(type) {
		case map[string]any:
			v = c[p]
		case []any:
			i, err := strconv.Atoi(p)
			if err != nil || i < 0 || i >= len(c) {
				return nil
			}
			v = c[i]
		default:
			return nil
		}
	}
	return v
}

// propertyNames lists the properties the schema at schemaURL declares.
func propertyNames(doc any, schemaURL string) []string {
	_, frag, _ := strings.Cut(schemaURL, "#")
	v := doc
	for _, tok := range strings.Split(strings.TrimPrefix(frag, "/"), "/") {
		if tok == "" {
			continue
		}
		tok = strings.ReplaceAll(strings.ReplaceAll(tok, "~1", "/"), "~0", "~")
		v = valueAt(v, []string{tok})
	}
	m, _ := v.(map[string]any)
	props, _ := m["properties"].(map[string]any)
	names := make([]string, 0, len(props))
	for k := range props {
		names = append(names, k)
	}
	slices.Sort(names)
	return names
}

func kindOf(v any) string {
	switch v.(type) {
	case nil:
		return "null"
	case map[string]any:
		return "object"
	case []any:
		return "array"
	case string:
		return "string"
	case bool:
		return "boolean"
	}
	return "number"
}

func jsonText(v any) string {
	b, err := json.Marshal(v)
	if err != nil {
		return fmt.Sprint(v)
	}
	return string(b)
}

// quoted renders strings quoted, anything else as JSON.
func quoted(v any) string {
	if s, ok := v.(string); ok {
		return strconv.Quote(s)
	}
	return jsonText(v)
}

func rat(r *big.Rat) string {
	if r.IsInt() {
		return r.Num().String()
	}
	f, _ := r.Float64()
	return strconv.FormatFloat(f, 'g', -1, 64)
}

func plural(n int) string {
	if n == 1 {
		return ""
	}
	return "s"
}

func ies(n int) string {
	if n == 1 {
		return "y"
	}
	return "ies"
}
