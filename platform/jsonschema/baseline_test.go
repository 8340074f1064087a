package jsonschema

import (
	"bytes"
	"encoding/json"
	"fmt"
	"slices"
	"strconv"
	"strings"
	"sync"
)

// oldSchema is the agent's validator before this package (its
// services/agent/internal/tools/schema.go), kept as the benchmark's
// baseline: the subset of JSON Schema the tools' parameters used (type,
// properties, required, items, enum, minimum, maximum, additionalProperties
// false). An empty type accepts any value.
type oldSchema struct {
	Type                 string                `json:"type,omitempty"`
	Description          string                `json:"description,omitempty"`
	Properties           map[string]*oldSchema `json:"properties,omitempty"`
	Required             []string              `json:"required,omitempty"`
	Items                *oldSchema            `json:"items,omitempty"`
	Enum                 []string              `json:"enum,omitempty"`
	Minimum              *float64              `json:"minimum,omitempty"`
	Maximum              *float64              `json:"maximum,omitempty"`
	AdditionalProperties *bool                 `json:"additionalProperties,omitempty"`

	once sync.Once
	text string
}

// object returns an object oldSchema with no extra properties allowed.
func oldObject(required []string, props map[string]*oldSchema) *oldSchema {
	no := false
	return &oldSchema{Type: "object", Properties: props, Required: required, AdditionalProperties: &no}
}

func oldStr(desc string) *oldSchema { return &oldSchema{Type: "string", Description: desc} }

func oldInteger(desc string, minimum float64) *oldSchema {
	return &oldSchema{Type: "integer", Description: desc, Minimum: &minimum}
}

func oldIntegerRange(desc string, minimum, maximum float64) *oldSchema {
	return &oldSchema{Type: "integer", Description: desc, Minimum: &minimum, Maximum: &maximum}
}

func oldArray(desc string, items *oldSchema) *oldSchema {
	return &oldSchema{Type: "array", Description: desc, Items: items}
}

func oldEnum(desc string, values ...string) *oldSchema {
	return &oldSchema{Type: "string", Description: desc, Enum: values}
}

// json returns the oldSchema as JSON text, computed once.
func (sc *oldSchema) json() string {
	sc.once.Do(func() {
		b, err := json.Marshal(sc)
		if err != nil {
			panic(fmt.Sprintf("oldSchema does not marshal: %v", err))
		}
		sc.text = string(b)
	})
	return sc.text
}

// validateJSON parses the model's arguments and checks them against the
// oldSchema. It returns the arguments as JSON text ("{}" for empty or null
// input).
func (sc *oldSchema) validateJSON(args string) ([]byte, error) {
	raw := []byte(strings.TrimSpace(args))
	if len(raw) == 0 || string(raw) == "null" { // some providers send null for no arguments
		raw = []byte("{}")
	}
	dec := json.NewDecoder(bytes.NewReader(raw))
	dec.UseNumber()
	var v any
	if err := dec.Decode(&v); err != nil {
		return nil, fmt.Errorf("arguments are not valid JSON: %v", err)
	}
	if dec.More() {
		return nil, fmt.Errorf("arguments are not valid JSON: extra data after the object")
	}
	if err := sc.validate(v, "arguments"); err != nil {
		return nil, err
	}
	return raw, nil
}

// validate checks v at path. Error text: "<path>: <what is wrong>".
func (sc *oldSchema) validate(v any, path string) error {
	if sc == nil {
		return nil
	}
	switch sc.Type {
	case "object":
		m, ok := v.(map[string]any)
		if !ok {
			return fmt.Errorf("%s: expected object, got %s", path, oldKindOf(v))
		}
		for _, name := range sc.Required {
			if _, ok := m[name]; !ok {
				return fmt.Errorf("%s: missing required property %q", path, name)
			}
		}
		keys := make([]string, 0, len(m))
		for k := range m {
			keys = append(keys, k)
		}
		slices.Sort(keys)
		for _, k := range keys {
			p, ok := sc.Properties[k]
			if !ok {
				if sc.AdditionalProperties != nil && !*sc.AdditionalProperties {
					return fmt.Errorf("%s: unknown property %q (allowed: %s)", path, k, strings.Join(sc.propertyNames(), ", "))
				}
				continue
			}
			if err := p.validate(m[k], path+"."+k); err != nil {
				return err
			}
		}
	case "array":
		a, ok := v.([]any)
		if !ok {
			return fmt.Errorf("%s: expected array, got %s", path, oldKindOf(v))
		}
		for i, e := range a {
			if err := sc.Items.validate(e, path+"["+strconv.Itoa(i)+"]"); err != nil {
				return err
			}
		}
	case "string":
		s, ok := v.(string)
		if !ok {
			return fmt.Errorf("%s: expected string, got %s", path, oldKindOf(v))
		}
		if len(sc.Enum) > 0 && !slices.Contains(sc.Enum, s) {
			return fmt.Errorf("%s: %q is not one of %s", path, s, strings.Join(sc.Enum, ", "))
		}
	case "boolean":
		if _, ok := v.(bool); !ok {
			return fmt.Errorf("%s: expected boolean, got %s", path, oldKindOf(v))
		}
	case "integer", "number":
		n, ok := v.(json.Number)
		if !ok {
			return fmt.Errorf("%s: expected %s, got %s", path, sc.Type, oldKindOf(v))
		}
		f, err := n.Float64()
		if err != nil {
			return fmt.Errorf("%s: expected %s, got %s", path, sc.Type, n)
		}
		if _, err := n.Int64(); sc.Type == "integer" && err != nil {
			return fmt.Errorf("%s: expected integer, got %s", path, n)
		}
		if sc.Minimum != nil && f < *sc.Minimum {
			return fmt.Errorf("%s: must be at least %v, got %s", path, *sc.Minimum, n)
		}
		if sc.Maximum != nil && f > *sc.Maximum {
			return fmt.Errorf("%s: must be at most %v, got %s", path, *sc.Maximum, n)
		}
	}
	return nil
}

func (sc *oldSchema) propertyNames() []string {
	names := make([]string, 0, len(sc.Properties))
	for k := range sc.Properties {
		names = append(names, k)
	}
	slices.Sort(names)
	return names
}

func oldKindOf(v any) string {
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
	case json.Number:
		return "number"
	}
	return fmt.Sprintf("%T", v)
}
