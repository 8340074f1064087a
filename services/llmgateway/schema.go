package llmgateway

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"math"
	"reflect"
	"regexp"
	"slices"
	"strings"

	"google.golang.org/grpc/codes"

	llmv1 "github.com/fabro-sh/fabro-go/gen/fabro/llm/v1"
	"github.com/fabro-sh/fabro-go/platform/grpcerr"
)

// schema is a compiled JSON Schema of the subset the gateway checks: type,
// properties, required, items, enum, additionalProperties, and anyOf.
// Other keywords (description, format, minimum, ...) are accepted and not
// checked; they are for the model.
type schema struct {
	types        []string
	properties   map[string]*schema
	required     []string
	items        *schema
	enum         []any
	hasEnum      bool
	additional   *schema // nil: anything allowed
	noAdditional bool
	anyOf        []*schema
}

var schemaTypes = []string{"object", "array", "string", "number", "integer", "boolean", "null"}

// compileSchema parses and compiles a JSON Schema document.
func compileSchema(text string) (*schema, error) {
	v, err := decodeJSON(text)
	if err != nil {
		return nil, fmt.Errorf("not valid JSON: %w", err)
	}
	return compileValue(v, "#")
}

func decodeJSON(text string) (any, error) {
	dec := json.NewDecoder(strings.NewReader(text))
	dec.UseNumber()
	var v any
	if err := dec.Decode(&v); err != nil {
		return nil, err
	}
	if _, err := dec.Token(); !errors.Is(err, io.EOF) {
		return nil, errors.New("trailing data after the JSON value")
	}
	return v, nil
}

func compileValue(v any, path string) (*schema, error) {
	switch v := v.(type) {
	case bool:
		if v {
			return &schema{}, nil
		}
		return &schema{types: []string{}}, nil // false: nothing validates
	case map[string]any:
		s := &schema{}
		switch t := v["type"].(type) {
		case nil:
		case string:
			s.types = []string{t}
		case []any:
			for _, e := range t {
				str, ok := e.(string)
				if !ok {
					return nil, fmt.Errorf("%s/type: want strings", path)
				}
				s.types = append(s.types, str)
			}
		default:
			return nil, fmt.Errorf("%s/type: want a string or a list of strings", path)
		}
		for _, t := range s.types {
			if !slices.Contains(schemaTypes, t) {
				return nil, fmt.Errorf("%s/type: unknown type %q", path, t)
			}
		}
		if p, ok := v["properties"]; ok {
			props, ok := p.(map[string]any)
			if !ok {
				return nil, fmt.Errorf("%s/properties: want an object", path)
			}
			s.properties = map[string]*schema{}
			for name, ps := range props {
				c, err := compileValue(ps, path+"/properties/"+name)
				if err != nil {
					return nil, err
				}
				s.properties[name] = c
			}
		}
		if r, ok := v["required"]; ok {
			list, ok := r.([]any)
			if !ok {
				return nil, fmt.Errorf("%s/required: want a list of strings", path)
			}
			for _, e := range list {
				str, ok := e.(string)
				if !ok {
					return nil, fmt.Errorf("%s/required: want a list of strings", path)
				}
				s.required = append(s.required, str)
			}
		}
		if it, ok := v["items"]; ok {
			c, err := compileValue(it, path+"/items")
			if err != nil {
				return nil, err
			}
			s.items = c
		}
		if e, ok := v["enum"]; ok {
			list, ok := e.([]any)
			if !ok {
				return nil, fmt.Errorf("%s/enum: want a list", path)
			}
			s.enum, s.hasEnum = list, true
		}
		switch ap := v["additionalProperties"].(type) {
		case nil:
		case bool:
			s.noAdditional = !ap
		case map[string]any:
			c, err := compileValue(ap, path+"/additionalProperties")
			if err != nil {
				return nil, err
			}
			s.additional = c
		default:
			return nil, fmt.Errorf("%s/additionalProperties: want a boolean or a schema", path)
		}
		if a, ok := v["anyOf"]; ok {
			list, ok := a.([]any)
			if !ok {
				return nil, fmt.Errorf("%s/anyOf: want a list of schemas", path)
			}
			for i, e := range list {
				c, err := compileValue(e, fmt.Sprintf("%s/anyOf/%d", path, i))
				if err != nil {
					return nil, err
				}
				s.anyOf = append(s.anyOf, c)
			}
		}
		return s, nil
	}
	return nil, fmt.Errorf("%s: a schema must be an object or a boolean", path)
}

// validate checks a decoded JSON value (numbers as json.Number).
func (s *schema) validate(v any, path string) error {
	if s.types != nil {
		if !slices.ContainsFunc(s.types, func(t string) bool { return hasType(v, t) }) {
			if len(s.types) == 0 {
				return fmt.Errorf("%s: no value is allowed here", path)
			}
			return fmt.Errorf("%s: want %s, got %s", path, strings.Join(s.types, " or "), typeName(v))
		}
	}
	if s.hasEnum && !slices.ContainsFunc(s.enum, func(e any) bool { return jsonEqual(e, v) }) {
		return fmt.Errorf("%s: %v is not one of the allowed values", path, v)
	}
	switch v := v.(type) {
	case map[string]any:
		for _, r := range s.required {
			if _, ok := v[r]; !ok {
				return fmt.Errorf("%s: missing required property %q", path, r)
			}
		}
		keys := make([]string, 0, len(v))
		for k := range v {
			keys = append(keys, k)
		}
		slices.Sort(keys) // report the first error deterministically
		for _, k := range keys {
			if ps, ok := s.properties[k]; ok {
				if err := ps.validate(v[k], path+"/"+k); err != nil {
					return err
				}
				continue
			}
			if s.noAdditional {
				return fmt.Errorf("%s: property %q is not allowed", path, k)
			}
			if s.additional != nil {
				if err := s.additional.validate(v[k], path+"/"+k); err != nil {
					return err
				}
			}
		}
	case []any:
		if s.items != nil {
			for i, e := range v {
				if err := s.items.validate(e, fmt.Sprintf("%s/%d", path, i)); err != nil {
					return err
				}
			}
		}
	}
	if len(s.anyOf) > 0 {
		var first error
		for _, a := range s.anyOf {
			err := a.validate(v, path)
			if err == nil {
				return nil
			}
			if first == nil {
				first = err
			}
		}
		return fmt.Errorf("matches none of anyOf: %w", first)
	}
	return nil
}

func hasType(v any, t string) bool {
	switch t {
	case "object":
		_, ok := v.(map[string]any)
		return ok
	case "array":
		_, ok := v.([]any)
		return ok
	case "string":
		_, ok := v.(string)
		return ok
	case "boolean":
		_, ok := v.(bool)
		return ok
	case "null":
		return v == nil
	case "number":
		_, ok := v.(json.Number)
		return ok
	case "integer":
		n, ok := v.(json.Number)
		if !ok {
			return false
		}
		if _, err := n.Int64(); err == nil {
			return true
		}
		f, err := n.Float64()
		return err == nil && f == float64(int64(f))
	}
	return false
}

func typeName(v any) string {
	for _, t := range []string{"object", "array", "string", "boolean", "null", "integer", "number"} {
		if hasType(v, t) {
			return t
		}
	}
	return fmt.Sprintf("%T", v)
}

func jsonEqual(a, b any) bool {
	if an, ok := a.(json.Number); ok {
		bn, ok := b.(json.Number)
		if !ok {
			return false
		}
		af, err1 := an.Float64()
		bf, err2 := bn.Float64()
		return err1 == nil && err2 == nil && af == bf
	}
	return reflect.DeepEqual(a, b)
}

var (
	toolNameRE   = regexp.MustCompile(`^[A-Za-z0-9_-]{1,64}$`)
	schemaNameRE = regexp.MustCompile(`^[A-Za-z0-9_-]{1,64}$`)
)

// invalid is INVALID_ARGUMENT for the request field named (its path in the
// RPC's request, "request.tools[2].name").
func invalid(field, format string, args ...any) *gwError {
	e := newError(codes.InvalidArgument, llmv1.ErrorKind_ERROR_KIND_INVALID_REQUEST, format, args...).withReason(grpcerr.ReasonInvalidArgument)
	e.field = field
	return e
}

// validateRequest rejects what no provider could accept: unset roles, bad
// tool names or schemas, a tool choice naming no tool, a bad response format.
func validateRequest(req *llmv1.Request) error {
	switch {
	case len(req.GetMessages()) == 0:
		return invalid("request.messages", "at least one message is required")
	case req.MaxOutputTokens != nil && req.GetMaxOutputTokens() <= 0:
		return invalid("request.max_output_tokens", "max_output_tokens must be positive when set, not %d", req.GetMaxOutputTokens())
	case req.Temperature != nil && (math.IsInf(req.GetTemperature(), 0) || !(req.GetTemperature() >= 0)): // NaN too
		return invalid("request.temperature", "temperature must be a non-negative number, not %v", req.GetTemperature())
	}
	for i, m := range req.GetMessages() {
		if m.GetRole() == llmv1.Role_ROLE_UNSPECIFIED {
			return invalid(fmt.Sprintf("request.messages[%d].role", i), "messages[%d]: role is required", i)
		}
	}
	names := map[string]bool{}
	for i, t := range req.GetTools() {
		if !toolNameRE.MatchString(t.GetName()) {
			return invalid(fmt.Sprintf("request.tools[%d].name", i), "tools[%d]: name %q must be 1-64 letters, digits, '_' or '-'", i, t.GetName())
		}
		if names[t.GetName()] {
			return invalid(fmt.Sprintf("request.tools[%d].name", i), "tools[%d]: duplicate tool name %q", i, t.GetName())
		}
		names[t.GetName()] = true
		if err := validateToolSchema(t.GetParameters()); err != nil {
			return invalid(fmt.Sprintf("request.tools[%d].parameters", i), "tools[%d] %s: malformed parameters schema: %v", i, t.GetName(), err)
		}
	}
	if tc := req.GetToolChoice(); tc.GetMode() == llmv1.ToolChoiceMode_TOOL_CHOICE_MODE_TOOL && !names[tc.GetToolName()] {
		return invalid("request.tool_choice.tool_name", "tool_choice names %q, which is not among the tools", tc.GetToolName())
	}
	if rf := req.GetResponseFormat(); rf.GetType() == llmv1.ResponseFormatType_RESPONSE_FORMAT_TYPE_JSON_SCHEMA {
		if !schemaNameRE.MatchString(rf.GetName()) {
			return invalid("request.response_format.name", "response_format: schema name %q must be 1-64 letters, digits, '_' or '-'", rf.GetName())
		}
		if _, err := compileSchema(rf.GetSchema()); err != nil {
			return invalid("request.response_format.schema", "response_format: malformed schema: %v", err)
		}
	}
	return nil
}

// validateToolSchema accepts an empty schema (no arguments) or an object
// schema.
func validateToolSchema(text string) error {
	if strings.TrimSpace(text) == "" {
		return nil
	}
	if !bytes.HasPrefix(bytes.TrimSpace([]byte(text)), []byte("{")) {
		return errors.New("want a JSON object")
	}
	s, err := compileSchema(text)
	if err != nil {
		return err
	}
	if s.types != nil && !slices.Equal(s.types, []string{"object"}) {
		return errors.New(`the arguments schema must have type "object"`)
	}
	return nil
}
