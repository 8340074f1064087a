package agent

import (
	"context"
	"errors"
	"reflect"
	"testing"

	"google.golang.org/grpc"
	"google.golang.org/grpc/metadata"

	llmv1 "github.com/fabro-sh/fabro-go/gen/fabro/llm/v1"
	sandboxv1 "github.com/fabro-sh/fabro-go/gen/fabro/sandbox/v1"
	"github.com/fabro-sh/fabro-go/platform/auth"
)

// recordingConn records the forwarded principal of each call and fails it.
type recordingConn struct{ got map[string][]string }

var errRecorded = errors.New("recorded")

func (r *recordingConn) record(ctx context.Context, method string) {
	md, _ := metadata.FromOutgoingContext(ctx)
	r.got[method] = md.Get(auth.ForwardedPrincipalHeader)
}

func (r *recordingConn) Invoke(ctx context.Context, method string, _, _ any, _ ...grpc.CallOption) error {
	r.record(ctx, method)
	return errRecorded
}

func (r *recordingConn) NewStream(ctx context.Context, _ *grpc.StreamDesc, method string, _ ...grpc.CallOption) (grpc.ClientStream, error) {
	r.record(ctx, method)
	return nil, errRecorded
}

// TestActingSandboxEveryMethod calls every SandboxService method, from the
// service descriptor, through the agent's sandbox client and checks each
// names the person it acts for, once: the session's owner over the caller,
// else the caller when a person, else nobody (the agent alone).
func TestActingSandboxEveryMethod(t *testing.T) {
	admin := auth.WithPrincipal(t.Context(), auth.Principal{Name: "root", Role: auth.RoleAdmin})
	tests := []struct {
		name string
		ctx  context.Context
		want []string
	}{
		{"session owner over the caller", actFor(admin, "user:alice"), []string{"user:alice"}},
		{"the caller", admin, []string{"admin:root"}},
		{"an earlier forwarded principal replaced",
			metadata.AppendToOutgoingContext(actFor(admin, "user:alice"), auth.ForwardedPrincipalHeader, "user:bob"), []string{"user:alice"}},
		{"the agent alone", auth.WithPrincipal(t.Context(), auth.Principal{Name: auth.ServiceAgent, Role: auth.RoleService}), nil},
		{"no authentication", t.Context(), nil},
	}
	methods := sandboxv1.File_fabro_sandbox_v1_sandbox_proto.Services().ByName("SandboxService").Methods()
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			rc := &recordingConn{got: map[string][]string{}}
			c := reflect.ValueOf(actingSandbox{c: sandboxv1.NewSandboxServiceClient(rc)})
			for i := range methods.Len() {
				m := methods.Get(i)
				fn := c.MethodByName(string(m.Name()))
				if !fn.IsValid() {
					t.Fatalf("actingSandbox has no method %s", m.Name())
				}
				if m.IsStreamingClient() {
					fn.Call([]reflect.Value{reflect.ValueOf(tt.ctx)}) // requests go on the stream
				} else {
					req := reflect.New(fn.Type().In(1).Elem())
					fn.Call([]reflect.Value{reflect.ValueOf(tt.ctx), req})
				}
				full := "/" + string(m.Parent().FullName()) + "/" + string(m.Name())
				got, called := rc.got[full]
				if !called {
					t.Errorf("%s did not reach the connection", full)
				}
				if !reflect.DeepEqual(got, tt.want) {
					t.Errorf("%s forwarded %q, want %q", full, got, tt.want)
				}
			}
		})
	}
}

// TestActingLLMNamesTheCallersToken: a session's turns reach the gateway
// with the agent's credential, acting for the session's owner; they must
// also name the token of the person whose call started them, or the
// gateway governs them by no token at all and a token's budget, rate
// limits and model list are bypassed by prompting a session.
func TestActingLLMNamesTheCallersToken(t *testing.T) {
	alice := auth.WithPrincipal(t.Context(), auth.Principal{Name: "alice", Role: auth.RoleUser, TokenID: "00000000000000a1"})
	root := auth.WithPrincipal(t.Context(), auth.Principal{Name: "root", Role: auth.RoleAdmin, TokenID: "00000000000000f0"})
	agent := auth.WithPrincipal(t.Context(), auth.Principal{Name: auth.ServiceAgent, Role: auth.RoleService, TokenID: "00000000000000e0"})
	tests := []struct {
		name      string
		ctx       context.Context
		principal []string
		tokenID   []string
	}{
		{"the owner's own prompt", actFor(alice, "user:alice"), []string{"user:alice"}, []string{"00000000000000a1"}},
		{"an admin prompting another's session", actFor(root, "user:alice"), []string{"user:alice"}, []string{"00000000000000f0"}},
		{"an earlier forwarded token id replaced",
			metadata.AppendToOutgoingContext(actFor(alice, "user:alice"), auth.ForwardedTokenIDHeader, "00000000000000b2"), []string{"user:alice"}, []string{"00000000000000a1"}},
		{"the agent alone acting for the owner (no token to count)", actFor(agent, "user:alice"), []string{"user:alice"}, nil},
		{"the agent alone", agent, nil, nil},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			var md metadata.MD
			rc := captureConn(func(ctx context.Context) { md, _ = metadata.FromOutgoingContext(ctx) })
			c := actingLLM{llmv1.NewLLMGatewayServiceClient(rc), nil}
			for _, call := range []func(){
				func() { _, _ = c.Stream(tt.ctx, &llmv1.StreamRequest{}) },
				func() { _, _ = c.Complete(tt.ctx, &llmv1.CompleteRequest{}) },
			} {
				md = nil
				call()
				if got := md.Get(auth.ForwardedPrincipalHeader); !reflect.DeepEqual(got, tt.principal) {
					t.Errorf("forwarded principal %q, want %q", got, tt.principal)
				}
				if got := md.Get(auth.ForwardedTokenIDHeader); !reflect.DeepEqual(got, tt.tokenID) {
					t.Errorf("forwarded token id %q, want %q", got, tt.tokenID)
				}
			}
		})
	}
}

type captureConn func(context.Context)

func (c captureConn) Invoke(ctx context.Context, _ string, _, _ any, _ ...grpc.CallOption) error {
	c(ctx)
	return errRecorded
}

func (c captureConn) NewStream(ctx context.Context, _ *grpc.StreamDesc, _ string, _ ...grpc.CallOption) (grpc.ClientStream, error) {
	c(ctx)
	return nil, errRecorded
}
