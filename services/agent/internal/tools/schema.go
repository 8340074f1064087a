package tools

import (
	"encoding/json"
	"fmt"
	"strings"
	"sync"

	"github.com/fabro-sh/fabro-go/platform/jsonschema"
)

// schema builds the JSON Schema of a built-in tool's parameters (type,
// description, properties, required, items, enum, minimum, maximum and
// additionalProperties false); an extra tool's schema is the caller's text
// as it is (raw). Either is validated by platform/jsonschema, the validator
// the gateway uses too.
type schema struct {
	Type                 string             `json:"type,omitempty"`
	Description          string             `json:"description,omitempty"`
	Properties           map[string]*schema `json:"properties,omitempty"`
	Required             []string           `json:"required,omitempty"`
	Items                *schema            `json:"items,omitempty"`
	Enum                 []string           `json:"enum,omitempty"`
	Minimum              *float64           `json:"minimum,omitempty"`
	Maximum              *float64           `json:"maximum,omitempty"`
	AdditionalProperties *bool              `json:"additionalProperties,omitempty"`

	raw      string             // an extra tool's schema text, compiled
	compiled *jsonschema.Schema // set with raw, or on the first validation

	once sync.Once
	text string
}

// object returns an object schema with no extra properties allowed.
func object(required []string, props map[string]*schema) *schema {
	no := false
	return &schema{Type: "object", Properties: props, Required: required, AdditionalProperties: &no}
}

func str(desc string) *schema { return &schema{Type: "string", Description: desc} }

func boolean(desc string) *schema { return &schema{Type: "boolean", Description: desc} }

func integer(desc string, minimum float64) *schema {
	return &schema{Type: "integer", Description: desc, Minimum: &minimum}
}

func integerRange(desc string, minimum, maximum float64) *schema {
	return &schema{Type: "integer", Description: desc, Minimum: &minimum, Maximum: &maximum}
}

func array(desc string, items *schema) *schema {
	return &schema{Type: "array", Description: desc, Items: items}
}

func enum(desc string, values ...string) *schema {
	return &schema{Type: "string", Description: desc, Enum: values}
}

// json returns the schema as JSON text, computed once.
func (sc *schema) json() string {
	sc.once.Do(func() {
		if sc.raw != "" {
			sc.text = sc.raw
			return
		}
		b, err := json.Marshal(sc)
		if err != nil {
			panic(fmt.Sprintf("tools: schema does not marshal: %v", err))
		}
		sc.text = string(b)
		// Built-in schemas are the same text in every session: compiled once
		// per process.
		sc.compiled = jsonschema.MustCompileCached(sc.text)
	})
	return sc.text
}

// validateJSON parses the model's arguments and checks them against the
// schema. It returns the arguments as JSON text ("{}" for empty or null
// input). Errors read "<path>: <what is wrong>", the path from
// "arguments".
func (sc *schema) validateJSON(args string) ([]byte, error) {
	raw := []byte(strings.TrimSpace(args))
	if len(raw) == 0 || string(raw) == "null" { // some providers send null for no arguments
		raw = []byte("{}")
	}
	v, err := jsonschema.Decode(raw)
	if err != nil {
		return nil, fmt.Errorf("arguments are not valid JSON: %v", err)
	}
	sc.json()
	if err := sc.compiled.Validate(v, "arguments"); err != nil {
		return nil, err
	}
	return raw, nil
}

// decode unmarshals validated arguments into a tool's parameter struct.
func decode[T any](args []byte) (T, error) {
	var v T
	if err := json.Unmarshal(args, &v); err != nil {
		return v, invalidArgs("Tool argument validation failed: %v", err)
	}
	return v, nil
}
