package llmgateway

import (
	"context"
	"errors"
	"strings"
	"time"

	"google.golang.org/grpc/codes"
	"google.golang.org/protobuf/types/known/durationpb"

	llmv1 "github.com/fabro-sh/fabro-go/gen/fabro/llm/v1"
)

const (
	defaultProbeTimeout = 30 * time.Second
	probeTool           = "probe_lookup"
)

// Probe implements LLMGatewayService.Probe: basic asks for one word; deep
// makes the model call a tool, then answer with the tool's result.
func (s *Service) Probe(ctx context.Context, req *llmv1.ProbeRequest) (*llmv1.ProbeResponse, error) {
	route, err := s.resolve(req.GetModel())
	if err != nil {
		return nil, catalogError("model", err).statusErr()
	}
	if d := req.GetTimeout(); d != nil && (!d.IsValid() || d.AsDuration() < 0) {
		return nil, invalid("timeout", "timeout must be a valid, non-negative duration").statusErr()
	}
	timeout := defaultProbeTimeout
	if d := req.GetTimeout(); d != nil && d.AsDuration() > 0 {
		timeout = d.AsDuration()
	}
	ctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()

	base := &llmv1.Request{Model: route.Canonical(), ReasoningEffort: req.GetReasoningEffort(), DisableFallbacks: true,
		Metadata: map[string]string{"purpose": "probe"}}
	out := &llmv1.ProbeResponse{ModelId: route.Model.GetModelId(), ProviderId: route.Provider.GetProviderId()}
	start := time.Now()
	var reply string
	if req.GetMode() == llmv1.ProbeMode_PROBE_MODE_DEEP {
		reply, err = s.deepProbe(ctx, base)
	} else {
		base.Messages = []*llmv1.Message{userText("Reply with exactly one word: ready")}
		var resp *llmv1.Response
		if resp, err = s.call(ctx, base, nil); err == nil {
			reply = replyText(resp)
			if reply == "" {
				err = probeFailure("the model replied with no text")
			}
		}
	}
	out.Latency = durationpb.New(time.Since(start))
	out.Reply = reply
	if err != nil {
		var ge *gwError
		if !errors.As(err, &ge) {
			ge = classify(ctx, err, route)
		}
		switch ge.code {
		case codes.InvalidArgument, codes.NotFound:
			if ge.detail.GetStatusCode() == 0 { // ours, not the provider's
				return nil, ge.statusErr()
			}
		case codes.FailedPrecondition:
			if len(ge.detail.GetMissingCredentials()) > 0 || ge.detail.GetStatusCode() == 0 {
				return nil, ge.statusErr()
			}
		}
		out.Error = ge.detail
		return out, nil
	}
	out.Ok = true
	return out, nil
}

// deepProbe is the two-step tool exchange: the model must call probe_lookup,
// then answer with the code word the tool returns.
func (s *Service) deepProbe(ctx context.Context, base *llmv1.Request) (string, error) {
	word := "kestrel" + randomID()[:6]
	req := cloneRequest(base)
	req.Tools = []*llmv1.ToolDefinition{{
		Name:        probeTool,
		Description: "Returns the code word the user asks for.",
		Parameters:  `{"type":"object","properties":{"key":{"type":"string"}},"required":["key"]}`,
	}}
	req.ToolChoice = &llmv1.ToolChoice{Mode: llmv1.ToolChoiceMode_TOOL_CHOICE_MODE_REQUIRED}
	req.Messages = []*llmv1.Message{userText("Call the probe_lookup tool with key \"word\", then reply with only the code word it returns.")}
	first, err := s.call(ctx, req, nil)
	if err != nil {
		return "", err
	}
	var call *llmv1.ToolCall
	for _, p := range first.GetParts() {
		if tc := p.GetToolCall(); tc != nil && tc.GetName() == probeTool {
			call = tc
			break
		}
	}
	if call == nil {
		return replyText(first), probeFailure("the model did not call the probe tool")
	}
	req.ToolChoice = &llmv1.ToolChoice{Mode: llmv1.ToolChoiceMode_TOOL_CHOICE_MODE_AUTO}
	req.Messages = append(req.Messages,
		&llmv1.Message{Role: llmv1.Role_ROLE_ASSISTANT, Parts: first.GetParts()},
		&llmv1.Message{Role: llmv1.Role_ROLE_TOOL, Parts: []*llmv1.ContentPart{{Part: &llmv1.ContentPart_ToolResult{ToolResult: &llmv1.ToolResult{
			ToolCallId: call.GetId(), Name: probeTool,
			Content: []*llmv1.ContentPart{{Part: &llmv1.ContentPart_Text{Text: &llmv1.TextPart{Text: word}}}},
		}}}}},
	)
	second, err := s.call(ctx, req, nil)
	if err != nil {
		return "", err
	}
	reply := replyText(second)
	if !strings.Contains(reply, word) {
		return reply, probeFailure("the model's answer does not contain the tool's result")
	}
	return reply, nil
}

func probeFailure(msg string) *gwError {
	return newError(codes.Unknown, llmv1.ErrorKind_ERROR_KIND_RESPONSE_DECODE, "%s", msg)
}

func userText(text string) *llmv1.Message {
	return &llmv1.Message{Role: llmv1.Role_ROLE_USER, Parts: []*llmv1.ContentPart{{Part: &llmv1.ContentPart_Text{Text: &llmv1.TextPart{Text: text}}}}}
}

func replyText(resp *llmv1.Response) string {
	var b strings.Builder
	for _, p := range resp.GetParts() {
		b.WriteString(p.GetText().GetText())
	}
	return strings.TrimSpace(b.String())
}
