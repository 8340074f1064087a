package llmgateway

import (
	"bytes"
	"errors"
	"regexp"
	"slices"
	"strings"

	"google.golang.org/grpc/codes"

	llmv1 "github.com/fabro-sh/fabro-go/gen/fabro/llm/v1"
	"github.com/fabro-sh/fabro-go/platform/jsonschema"
)

// compileSchema compiles a caller's JSON Schema (a tool's parameters, a
// response format) with platform/jsonschema, the validator the agent uses
// for tool arguments too: every draft 2020-12 keyword, $ref inside the
// document only. Through its cache: a client sends the same tool schemas
// on every turn, and compiling one costs hundreds of microseconds.
func compileSchema(text string) (*jsonschema.Schema, error) {
	return jsonschema.CompileCached([]byte(text))
}

var (
	toolNameRE   = regexp.MustCompile(`^[A-Za-z0-9_-]{1,64}$`)
	schemaNameRE = regexp.MustCompile(`^[A-Za-z0-9_-]{1,64}$`)
)

func invalid(format string, args ...any) *gwError {
	return newError(codes.InvalidArgument, llmv1.ErrorKind_ERROR_KIND_INVALID_REQUEST, format, args...)
}

// validateRequest rejects what no provider could accept: unset roles, bad
// tool names or schemas, a tool choice naming no tool, a bad response format.
func validateRequest(req *llmv1.Request) error {
	for i, m := range req.GetMessages() {
		if m.GetRole() == llmv1.Role_ROLE_UNSPECIFIED {
			return invalid("messages[%d]: role is required", i)
		}
	}
	names := map[string]bool{}
	for i, t := range req.GetTools() {
		if !toolNameRE.MatchString(t.GetName()) {
			return invalid("tools[%d]: name %q must be 1-64 letters, digits, '_' or '-'", i, t.GetName())
		}
		if names[t.GetName()] {
			return invalid("tools[%d]: duplicate tool name %q", i, t.GetName())
		}
		names[t.GetName()] = true
		if err := validateToolSchema(t.GetParameters()); err != nil {
			return invalid("tools[%d] %s: malformed parameters schema: %v", i, t.GetName(), err)
		}
	}
	if tc := req.GetToolChoice(); tc.GetMode() == llmv1.ToolChoiceMode_TOOL_CHOICE_MODE_TOOL && !names[tc.GetToolName()] {
		return invalid("tool_choice names %q, which is not among the tools", tc.GetToolName())
	}
	if rf := req.GetResponseFormat(); rf.GetType() == llmv1.ResponseFormatType_RESPONSE_FORMAT_TYPE_JSON_SCHEMA {
		if !schemaNameRE.MatchString(rf.GetName()) {
			return invalid("response_format: schema name %q must be 1-64 letters, digits, '_' or '-'", rf.GetName())
		}
		if _, err := compileSchema(rf.GetSchema()); err != nil {
			return invalid("response_format: malformed schema: %v", err)
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
	if t := s.Types(); t != nil && !slices.Equal(t, []string{"object"}) {
		return errors.New(`the arguments schema must have type "object"`)
	}
	return nil
}
