package llmgateway

import (
	"context"
	"strings"
	"testing"

	"google.golang.org/genproto/googleapis/rpc/errdetails"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/proto"

	llmv1 "github.com/fabro-sh/fabro-go/gen/fabro/llm/v1"
	"github.com/fabro-sh/fabro-go/platform/auth"
	"github.com/fabro-sh/fabro-go/services/llmgateway/internal/codec"
)

const serverToolUse = `{"type":"server_tool_use","id":"srvtoolu_1","name":"web_search","input":{"query":"x"}}`

// opaqueTurn answers with one opaque provider item and text.
func opaqueTurn() turn {
	return turn{events: []codec.Event{
		evStart("r1", "up-model"),
		{Type: codec.EventBlockStart, Key: 0, Kind: llmv1.ContentBlockKind_CONTENT_BLOCK_KIND_OPAQUE, OpaqueKind: "fake.server_tool_use"},
		{Type: codec.EventBlockEnd, Key: 0, Opaque: serverToolUse},
		evBlock(1, llmv1.ContentBlockKind_CONTENT_BLOCK_KIND_TEXT), evText(1, "done"), evEnd(1),
		evFinish(llmv1.FinishReason_FINISH_REASON_STOP, "stop"),
	}}
}

// streamAs runs a Stream as principal (over bufconn without the
// interceptor: the principal is put in the context the way the
// interceptor would) and returns its opaque parts and its error.
func streamAs(t *testing.T, s *Service, p auth.Principal, req *llmv1.Request) (*llmv1.Response, error) {
	t.Helper()
	var resp *llmv1.Response
	ss := &captureStream{ctx: auth.WithPrincipal(t.Context(), p)}
	err := s.Stream(&llmv1.StreamRequest{Request: req}, ss)
	for _, ev := range ss.sent {
		if e := ev.GetEnded(); e != nil {
			resp = e.GetResponse()
		}
	}
	return resp, err
}

type captureStream struct {
	grpc.ServerStream
	ctx  context.Context
	sent []*llmv1.StreamResponse
}

func (c *captureStream) Context() context.Context { return c.ctx }
func (c *captureStream) Send(ev *llmv1.StreamResponse) error {
	c.sent = append(c.sent, proto.Clone(ev).(*llmv1.StreamResponse))
	return nil
}
func (c *captureStream) SetTrailer(metadata.MD) {}

// TestOpaquePartsSealed: the opaque parts the gateway's own API hands out
// are envelopes, on every event that carries them; sent back as received
// by the same caller to the same model, the provider gets its own item
// byte for byte; anything else (made up, altered, another provider's,
// another model's, another caller's, a kind changed, the provider's bare
// item) is INVALID_ARGUMENT naming the part's data field, and nothing goes
// upstream.
func TestOpaquePartsSealed(t *testing.T) {
	u := newUpstream(t, opaqueTurn())
	s := newGateway(t, u)
	alice := auth.Principal{Name: "alice", Role: auth.RoleUser}
	ss := &captureStream{ctx: auth.WithPrincipal(t.Context(), alice)}
	if err := s.Stream(&llmv1.StreamRequest{Request: userReq("fake/fake-2", "search")}, ss); err != nil {
		t.Fatal(err)
	}
	var sealed *llmv1.OpaquePart
	for _, ev := range ss.sent {
		var parts []*llmv1.ContentPart
		if e := ev.GetContentBlockEnd(); e != nil {
			parts = append(parts, e.GetPart())
		}
		parts = append(parts, ev.GetEnded().GetResponse().GetParts()...)
		for _, p := range parts {
			if o := p.GetOpaque(); o != nil {
				if strings.Contains(o.GetData(), "server_tool_use") || !strings.HasPrefix(o.GetData(), "fabro2.") {
					t.Fatalf("an opaque part handed out unsealed: %v", o)
				}
				sealed = o
			}
		}
	}
	if sealed == nil || sealed.GetKind() != "fake.server_tool_use" {
		t.Fatalf("no opaque part in the stream: %v", ss.sent)
	}

	// The next turn, carrying the part back.
	next := func(o *llmv1.OpaquePart, model string) *llmv1.Request {
		return &llmv1.Request{Model: model, Messages: []*llmv1.Message{
			userText("search"),
			{Role: llmv1.Role_ROLE_ASSISTANT, Parts: []*llmv1.ContentPart{{Part: &llmv1.ContentPart_Opaque{Opaque: o}}}},
			userText("go on"),
		}}
	}
	u.enqueue(textTurn("ok"))
	if _, err := streamAs(t, s, alice, next(sealed, "fake/fake-2")); err != nil {
		t.Fatalf("replaying the sealed part: %v", err)
	}
	reqs := u.requests()
	if got := string(reqs[len(reqs)-1].Request); !strings.Contains(got, `"data":`+jsonString(serverToolUse)) || strings.Contains(got, "fabro2.") {
		t.Fatalf("the provider did not get its own item back: %s", got)
	}

	// Another model's and another provider's, sealed by this gateway.
	u.enqueue(opaqueTurn(), opaqueTurn())
	other := func(model string) *llmv1.OpaquePart {
		ss := &captureStream{ctx: auth.WithPrincipal(t.Context(), alice)}
		if err := s.Stream(&llmv1.StreamRequest{Request: &llmv1.Request{Model: model, Messages: []*llmv1.Message{userText("x")}, DisableFallbacks: true}}, ss); err != nil {
			t.Fatal(err)
		}
		for _, ev := range ss.sent {
			for _, p := range ev.GetEnded().GetResponse().GetParts() {
				if o := p.GetOpaque(); o != nil {
					return o
				}
			}
		}
		t.Fatalf("no opaque part from %s", model)
		return nil
	}
	otherModel, otherProvider := other("fake/fake-1"), other("backup/backup-1")

	i := strings.LastIndexByte(sealed.GetData(), '.') + 6
	altered := sealed.GetData()[:i] + string("AB"[btoi(sealed.GetData()[i] == 'A')]) + sealed.GetData()[i+1:]
	const field = "request.messages[1].parts[0].opaque.data"
	cases := []struct {
		name string
		as   auth.Principal
		part *llmv1.OpaquePart
		want string
	}{
		{"forged (the provider's item, bare)", alice, &llmv1.OpaquePart{Kind: "anthropic.server_tool_use", Data: serverToolUse}, "is not a round-trip envelope"},
		{"forged envelope", alice, &llmv1.OpaquePart{Kind: "fake.server_tool_use", Data: "fabro2.ZmFrZS9mYWtlLTI.AAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAA"}, "does not authenticate"},
		{"altered", alice, &llmv1.OpaquePart{Kind: sealed.GetKind(), Data: altered}, "does not authenticate"},
		{"kind changed", alice, &llmv1.OpaquePart{Kind: "anthropic.server_tool_use", Data: sealed.GetData()}, "another kind"},
		{"another model's", alice, otherModel, "made by fake/fake-1"},
		{"another provider's", alice, otherProvider, "made by backup/backup-1"},
		{"another principal's", auth.Principal{Name: "bob", Role: auth.RoleUser}, sealed, "does not authenticate"},
		{"an admin replaying a user's", auth.Principal{Name: "root", Role: auth.RoleAdmin}, sealed, "does not authenticate"},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			before := len(u.requests())
			_, err := streamAs(t, s, c.as, next(c.part, "fake/fake-2"))
			assertBadField(t, err, field, c.want)
			if n := len(u.requests()); n != before {
				t.Errorf("the request went upstream (%d calls)", n-before)
			}
			// The same through Complete.
			_, err = s.Complete(auth.WithPrincipal(t.Context(), c.as), &llmv1.CompleteRequest{Request: next(c.part, "fake/fake-2")})
			assertBadField(t, err, field, c.want)
			if n := len(u.requests()); n != before {
				t.Errorf("Complete: the request went upstream (%d calls)", n-before)
			}
		})
	}
	// A fallback route of the request's model may take it.
	u.enqueue(textTurn("ok"))
	if _, err := streamAs(t, s, alice, next(otherProvider, "fake/fake-1")); err != nil {
		t.Errorf("a part of the model's fallback route: %v", err)
	}
}

func assertBadField(t *testing.T, err error, field, want string) {
	t.Helper()
	st := status.Convert(err)
	if st.Code() != codes.InvalidArgument || !strings.Contains(st.Message(), want) {
		t.Fatalf("got %v, want INVALID_ARGUMENT containing %q", err, want)
	}
	var named bool
	var info bool
	for _, d := range st.Details() {
		switch x := d.(type) {
		case *errdetails.BadRequest:
			for _, v := range x.GetFieldViolations() {
				named = named || v.GetField() == field
			}
		case *errdetails.ErrorInfo:
			info = true
		}
	}
	if !named || !info {
		t.Errorf("details %v: want ErrorInfo and a BadRequest naming %s", st.Details(), field)
	}
}

func jsonString(s string) string {
	var b strings.Builder
	b.WriteByte('"')
	b.WriteString(strings.ReplaceAll(s, `"`, `\"`))
	b.WriteByte('"')
	return b.String()
}

func btoi(b bool) int {
	if b {
		return 1
	}
	return 0
}

// TestS3ImagesRefused: an s3:// image source, which Bedrock reads with
// the gateway's own role, is INVALID_ARGUMENT naming the field unless the
// operator allowed its bucket; nothing goes upstream.
func TestS3ImagesRefused(t *testing.T) {
	u := newUpstream(t)
	s := newGateway(t, u, func(c *Config) { c.BedrockS3Buckets = []string{"shared-images"} })
	req := func(url string) *llmv1.Request {
		return &llmv1.Request{Model: "fake/fake-2", Messages: []*llmv1.Message{{Role: llmv1.Role_ROLE_USER, Parts: []*llmv1.ContentPart{
			{Part: &llmv1.ContentPart_Text{Text: &llmv1.TextPart{Text: "what is this"}}},
			{Part: &llmv1.ContentPart_Image{Image: &llmv1.ImagePart{Source: &llmv1.ImagePart_Url{Url: url}, MediaType: "image/png"}}},
		}}}}
	}
	for _, url := range []string{"s3://gateway-private/secrets.png", "S3://gateway-private/x.png", "s3:///x.png", "s3://shared-images.evil/x.png"} {
		_, err := s.Complete(t.Context(), &llmv1.CompleteRequest{Request: req(url)})
		if st := status.Convert(err); st.Code() != codes.InvalidArgument || !strings.Contains(st.Message(), "request.messages[0].parts[1].image.url") {
			t.Errorf("%s: %v, want INVALID_ARGUMENT naming the field", url, err)
		}
	}
	if n := len(u.requests()); n != 0 {
		t.Fatalf("%d refused requests went upstream", n)
	}
	u.enqueue(textTurn("a cat"))
	if _, err := s.Complete(t.Context(), &llmv1.CompleteRequest{Request: req("s3://shared-images/cat.png")}); err != nil {
		t.Errorf("an allowed bucket: %v", err)
	}
}
