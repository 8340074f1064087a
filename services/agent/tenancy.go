package agent

import (
	"context"

	"google.golang.org/grpc"
	"google.golang.org/grpc/metadata"

	agentv1 "github.com/fabro-sh/fabro-go/gen/fabro/agent/v1"
	llmv1 "github.com/fabro-sh/fabro-go/gen/fabro/llm/v1"
	sandboxv1 "github.com/fabro-sh/fabro-go/gen/fabro/sandbox/v1"
	"github.com/fabro-sh/fabro-go/platform/auth"
)

// find is the session of an id a request names, when the caller may reach
// it: findAny's answer, or for another principal's session the very
// NOT_FOUND of an id no session has, so ids are no oracle. An admin's
// reach into another's session is audited.
func (s *Service) find(ctx context.Context, field, id string) (*session, *agentv1.SessionRecord, error) {
	return s.findAs(ctx, field, id, true)
}

// findAs is find; audit false is for listing, where an admin sees every
// session without a line for each.
func (s *Service) findAs(ctx context.Context, field, id string, audit bool) (*session, *agentv1.SessionRecord, error) {
	sess, rec, err := s.findAny(ctx, field, id)
	if err != nil {
		return nil, nil, err
	}
	owner := ownerOf(sess, rec)
	switch auth.Reaches(ctx, owner) {
	case auth.Unreachable:
		return nil, nil, sessionNotFound(field, id)
	case auth.AsAdmin:
		if audit {
			auth.Audit(ctx, s.logger, "session", id, owner)
		}
	}
	return sess, rec, nil
}

// ownerOf is the principal a session found by findAny records.
func ownerOf(sess *session, rec *agentv1.SessionRecord) string {
	if sess != nil {
		return sess.info.GetPrincipal() // set before the session is registered, never after
	}
	return rec.GetSession().GetPrincipal()
}

// actingForKey carries the person the agent's sandbox calls act for.
type actingForKey struct{}

// actFor returns ctx whose sandbox calls act for owner, the principal of
// the session they serve (auth.Owner's form): the sandbox service then
// sees that person, so a session's sandbox is created as its owner's and
// reached only when it is theirs, whoever made the call (an admin
// prompting another's session works in the owner's sandbox).
func actFor(ctx context.Context, owner string) context.Context {
	if owner == "" {
		return ctx
	}
	return context.WithValue(ctx, actingForKey{}, owner)
}

// actingFor is the person a sandbox call in ctx acts for: the session's
// owner set by actFor, else the caller when a person. Without either (the
// idle closer, a takeover on a cluster) the agent acts for itself.
func actingFor(ctx context.Context) string {
	if v, ok := ctx.Value(actingForKey{}).(string); ok {
		return v
	}
	if p, ok := auth.FromContext(ctx); ok && p.Role != auth.RoleService {
		return p.String()
	}
	return ""
}

// actingLLM is the agent's gateway client for a session's turns: Stream
// and Complete name the person they act for (forwarding), so the opaque
// parts the gateway hands out are bound to the session's owner and open
// again for that owner's next turn only.
type actingLLM struct {
	llmv1.LLMGatewayServiceClient
	sess *session // whose running prompt's governor the calls carry
}

func (a actingLLM) Stream(ctx context.Context, in *llmv1.StreamRequest, opts ...grpc.CallOption) (grpc.ServerStreamingClient[llmv1.StreamResponse], error) {
	return a.LLMGatewayServiceClient.Stream(forwarding(a.sess.governed(ctx)), in, opts...)
}

func (a actingLLM) Complete(ctx context.Context, in *llmv1.CompleteRequest, opts ...grpc.CallOption) (*llmv1.CompleteResponse, error) {
	return a.LLMGatewayServiceClient.Complete(forwarding(a.sess.governed(ctx)), in, opts...)
}

// forwarding is the outgoing context of a sandbox or gateway call: the
// person it acts for in auth's forwarded-principal header, replacing any,
// and the calling person's token id.
func forwarding(ctx context.Context) context.Context {
	who := actingFor(ctx)
	if who == "" {
		return ctx
	}
	md, _ := metadata.FromOutgoingContext(ctx)
	md = md.Copy()
	md.Set(auth.ForwardedPrincipalHeader, who)
	md.Delete(auth.ForwardedTokenIDHeader)
	// The token of the person whose call this is goes too: the gateway
	// governs a session's turns by it (budget, rate limits, model list),
	// and without it would govern them by none.
	if p, ok := auth.FromContext(ctx); ok && p.Role != auth.RoleService && p.TokenID != "" {
		md.Set(auth.ForwardedTokenIDHeader, p.TokenID)
	}
	return metadata.NewOutgoingContext(ctx, md)
}

// actingSandbox is the agent's sandbox client: every call names the
// person it acts for (forwarding). TestActingSandboxEveryMethod walks the
// service descriptor, so a new RPC cannot pass through unwrapped.
type actingSandbox struct {
	c sandboxv1.SandboxServiceClient
}

var _ sandboxv1.SandboxServiceClient = actingSandbox{}

func (a actingSandbox) ListDrivers(ctx context.Context, in *sandboxv1.ListDriversRequest, opts ...grpc.CallOption) (*sandboxv1.ListDriversResponse, error) {
	return a.c.ListDrivers(forwarding(ctx), in, opts...)
}

func (a actingSandbox) GetDriver(ctx context.Context, in *sandboxv1.GetDriverRequest, opts ...grpc.CallOption) (*sandboxv1.GetDriverResponse, error) {
	return a.c.GetDriver(forwarding(ctx), in, opts...)
}

func (a actingSandbox) CreateSandbox(ctx context.Context, in *sandboxv1.CreateSandboxRequest, opts ...grpc.CallOption) (*sandboxv1.CreateSandboxResponse, error) {
	return a.c.CreateSandbox(forwarding(ctx), in, opts...)
}

func (a actingSandbox) GetSandbox(ctx context.Context, in *sandboxv1.GetSandboxRequest, opts ...grpc.CallOption) (*sandboxv1.GetSandboxResponse, error) {
	return a.c.GetSandbox(forwarding(ctx), in, opts...)
}

func (a actingSandbox) ListSandboxes(ctx context.Context, in *sandboxv1.ListSandboxesRequest, opts ...grpc.CallOption) (*sandboxv1.ListSandboxesResponse, error) {
	return a.c.ListSandboxes(forwarding(ctx), in, opts...)
}

func (a actingSandbox) DeleteSandbox(ctx context.Context, in *sandboxv1.DeleteSandboxRequest, opts ...grpc.CallOption) (*sandboxv1.DeleteSandboxResponse, error) {
	return a.c.DeleteSandbox(forwarding(ctx), in, opts...)
}

func (a actingSandbox) ReadFile(ctx context.Context, in *sandboxv1.ReadFileRequest, opts ...grpc.CallOption) (*sandboxv1.ReadFileResponse, error) {
	return a.c.ReadFile(forwarding(ctx), in, opts...)
}

func (a actingSandbox) ReadFileBytes(ctx context.Context, in *sandboxv1.ReadFileBytesRequest, opts ...grpc.CallOption) (grpc.ServerStreamingClient[sandboxv1.ReadFileBytesResponse], error) {
	return a.c.ReadFileBytes(forwarding(ctx), in, opts...)
}

func (a actingSandbox) WriteFile(ctx context.Context, in *sandboxv1.WriteFileRequest, opts ...grpc.CallOption) (*sandboxv1.WriteFileResponse, error) {
	return a.c.WriteFile(forwarding(ctx), in, opts...)
}

func (a actingSandbox) DeleteFile(ctx context.Context, in *sandboxv1.DeleteFileRequest, opts ...grpc.CallOption) (*sandboxv1.DeleteFileResponse, error) {
	return a.c.DeleteFile(forwarding(ctx), in, opts...)
}

func (a actingSandbox) StatFile(ctx context.Context, in *sandboxv1.StatFileRequest, opts ...grpc.CallOption) (*sandboxv1.StatFileResponse, error) {
	return a.c.StatFile(forwarding(ctx), in, opts...)
}

func (a actingSandbox) ListDirectory(ctx context.Context, in *sandboxv1.ListDirectoryRequest, opts ...grpc.CallOption) (*sandboxv1.ListDirectoryResponse, error) {
	return a.c.ListDirectory(forwarding(ctx), in, opts...)
}

func (a actingSandbox) RenameFile(ctx context.Context, in *sandboxv1.RenameFileRequest, opts ...grpc.CallOption) (*sandboxv1.RenameFileResponse, error) {
	return a.c.RenameFile(forwarding(ctx), in, opts...)
}

func (a actingSandbox) MakeDirectory(ctx context.Context, in *sandboxv1.MakeDirectoryRequest, opts ...grpc.CallOption) (*sandboxv1.MakeDirectoryResponse, error) {
	return a.c.MakeDirectory(forwarding(ctx), in, opts...)
}

func (a actingSandbox) Exec(ctx context.Context, in *sandboxv1.ExecRequest, opts ...grpc.CallOption) (*sandboxv1.ExecResponse, error) {
	return a.c.Exec(forwarding(ctx), in, opts...)
}

func (a actingSandbox) ExecStream(ctx context.Context, in *sandboxv1.ExecStreamRequest, opts ...grpc.CallOption) (grpc.ServerStreamingClient[sandboxv1.ExecStreamResponse], error) {
	return a.c.ExecStream(forwarding(ctx), in, opts...)
}

func (a actingSandbox) CancelExec(ctx context.Context, in *sandboxv1.CancelExecRequest, opts ...grpc.CallOption) (*sandboxv1.CancelExecResponse, error) {
	return a.c.CancelExec(forwarding(ctx), in, opts...)
}

func (a actingSandbox) Grep(ctx context.Context, in *sandboxv1.GrepRequest, opts ...grpc.CallOption) (*sandboxv1.GrepResponse, error) {
	return a.c.Grep(forwarding(ctx), in, opts...)
}

func (a actingSandbox) Glob(ctx context.Context, in *sandboxv1.GlobRequest, opts ...grpc.CallOption) (*sandboxv1.GlobResponse, error) {
	return a.c.Glob(forwarding(ctx), in, opts...)
}

func (a actingSandbox) Walk(ctx context.Context, in *sandboxv1.WalkRequest, opts ...grpc.CallOption) (*sandboxv1.WalkResponse, error) {
	return a.c.Walk(forwarding(ctx), in, opts...)
}
