package llmgateway

import (
	"bytes"
	"errors"
	"fmt"
	"math"
	"regexp"
	"slices"
	"strings"

	"google.golang.org/grpc/codes"

	llmv1 "github.com/fabro-sh/fabro-go/gen/fabro/llm/v1"
	"github.com/fabro-sh/fabro-go/platform/grpcerr"
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
	if t := s.Types(); t != nil && !slices.Equal(t, []string{"object"}) {
		return errors.New(`the arguments schema must have type "object"`)
	}
	return nil
}
