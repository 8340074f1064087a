package agent

import (
	"context"
	"errors"
	"io"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/connectivity"
	"google.golang.org/grpc/metadata"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/reflect/protoreflect"
	"google.golang.org/protobuf/reflect/protoregistry"

	agentv1 "github.com/fabro-sh/fabro-go/gen/fabro/agent/v1"
	"github.com/fabro-sh/fabro-go/platform/auth"
	"github.com/fabro-sh/fabro-go/platform/grpcerr"
	"github.com/fabro-sh/fabro-go/services/agent/internal/records"
)

// mdForwardedBy marks a call one replica forwarded to another: it is
// served where it arrives, never forwarded again. The caller it acts for
// goes in auth's forwarded-principal headers, which the authentication
// interceptor accepts from the agent's service principal only.
const mdForwardedBy = "fabro-forwarded-by"

const reasonSessionOwned = "SESSION_OWNED_ELSEWHERE"

var agentMethods = agentv1.File_fabro_agent_v1_agent_proto.Services().ByName("AgentService").Methods()

// serviceDesc is the AgentService descriptor with every handler wrapped:
// it settles who the caller is (a forwarded principal), then, on a
// cluster, hands a call for a session another live replica owns to that
// replica. The server's own interceptors (authentication) run first.
func (s *Service) serviceDesc() *grpc.ServiceDesc {
	d := agentv1.AgentService_ServiceDesc
	d.Methods = append([]grpc.MethodDesc(nil), d.Methods...)
	d.Streams = append([]grpc.StreamDesc(nil), d.Streams...)
	for i := range d.Methods {
		m := &d.Methods[i]
		orig, full := m.Handler, "/"+d.ServiceName+"/"+m.MethodName
		out := messageType(agentMethods.ByName(protoreflect.Name(m.MethodName)).Output())
		mine := func(ctx context.Context, req any, _ *grpc.UnaryServerInfo, handler grpc.UnaryHandler) (any, error) {
			ctx, err := s.caller(ctx)
			if err != nil {
				return nil, err
			}
			addr, err := s.forwardTo(ctx, req)
			if err != nil {
				return nil, err
			}
			if addr != "" {
				reply := out.New().Interface()
				if err := s.forwardUnary(ctx, addr, full, req, reply); err != nil {
					return nil, err
				}
				return reply, nil
			}
			return handler(ctx, req)
		}
		m.Handler = func(srv any, ctx context.Context, dec func(any) error, ic grpc.UnaryServerInterceptor) (any, error) {
			chained := mine
			if ic != nil {
				chained = func(ctx context.Context, req any, info *grpc.UnaryServerInfo, handler grpc.UnaryHandler) (any, error) {
					return ic(ctx, req, info, func(ctx context.Context, req any) (any, error) { return mine(ctx, req, info, handler) })
				}
			}
			return orig(srv, ctx, dec, chained)
		}
	}
	for i := range d.Streams {
		st := &d.Streams[i]
		orig, full := st.Handler, "/"+d.ServiceName+"/"+st.StreamName
		md := agentMethods.ByName(protoreflect.Name(st.StreamName))
		in, out := messageType(md.Input()), messageType(md.Output())
		// The server's stream interceptors (authentication) wrap this
		// handler already.
		st.Handler = func(srv any, ss grpc.ServerStream) error {
			ctx, err := s.caller(ss.Context())
			if err != nil {
				return err
			}
			req := in.New().Interface()
			if err := ss.RecvMsg(req); err != nil {
				return err
			}
			addr, err := s.forwardTo(ctx, req)
			if err != nil {
				return err
			}
			if addr != "" {
				return s.forwardStream(ctx, addr, full, req, out, ss)
			}
			return orig(srv, &firstMsgStream{ServerStream: ss, ctx: ctx, first: req})
		}
	}
	return &d
}

func messageType(d protoreflect.MessageDescriptor) protoreflect.MessageType {
	mt, err := protoregistry.GlobalTypes.FindMessageByName(d.FullName())
	if err != nil {
		panic("agent: message type not registered: " + string(d.FullName()))
	}
	return mt
}

// firstMsgStream hands the handler the request already read.
type firstMsgStream struct {
	grpc.ServerStream
	ctx   context.Context
	first proto.Message
}

func (f *firstMsgStream) Context() context.Context { return f.ctx }
func (f *firstMsgStream) RecvMsg(m any) error {
	if f.first == nil {
		return f.ServerStream.RecvMsg(m)
	}
	proto.Merge(m.(proto.Message), f.first)
	f.first = nil
	return nil
}

// caller settles the principal a call acts for. With authentication the
// server's interceptor did (a forwarded principal only from the agent's
// service principal). Without it (a trusted network) a forwarded call's
// principal is taken as named, on a cluster only.
func (s *Service) caller(ctx context.Context) (context.Context, error) {
	if _, ok := auth.FromContext(ctx); ok || s.replica == nil {
		return ctx, nil
	}
	md, _ := metadata.FromIncomingContext(ctx)
	if fwd := md.Get(auth.ForwardedPrincipalHeader); len(fwd) == 1 {
		p, ok := auth.ParsePrincipal(fwd[0])
		if !ok {
			return nil, domain.New(codes.PermissionDenied, reasonForwardRefused, "the forwarded principal is not a person's")
		}
		if ids := md.Get(auth.ForwardedTokenIDHeader); len(ids) == 1 {
			p.TokenID = ids[0]
		}
		ctx = auth.WithPrincipal(ctx, p)
	}
	return ctx, nil
}

// forwardTo is the address of the replica a call belongs to, or "" to
// serve it here: outside a cluster, for a call already forwarded, for a
// call naming no session, and for a session this replica serves or
// nobody owns. Before a call is forwarded, the caller's reach is checked
// from the session's record: another principal's session is the NOT_FOUND
// of an unknown id here, whether or not its replica answers, so neither a
// replica's state nor its address says that the id exists.
func (s *Service) forwardTo(ctx context.Context, req any) (string, error) {
	if s.replica == nil {
		return "", nil
	}
	if md, _ := metadata.FromIncomingContext(ctx); len(md.Get(mdForwardedBy)) > 0 && forwardedByReplica(ctx, md) {
		return "", nil
	}
	m, ok := req.(proto.Message)
	if !ok {
		return "", nil
	}
	field := "session_id"
	id := stringField(m, "session_id")
	if id == "" {
		field, id = "parent_session_id", stringField(m, "parent_session_id") // a subagent lives with its parent
	}
	if id == "" {
		return "", nil
	}
	addr := s.replica.owner(ctx, id)
	if addr == "" {
		return "", nil
	}
	if err := checkID(field, id); err != nil {
		return "", err
	}
	rec, _, err := s.records.Get(ctx, id)
	switch {
	case errors.Is(err, records.ErrNotFound):
		return addr, nil // not written yet: the owner decides
	case err != nil:
		return "", s.recordError(ctx, field, id, err)
	}
	if auth.Reaches(ctx, rec.GetSession().GetPrincipal()) == auth.Unreachable {
		return "", sessionNotFound(field, id)
	}
	return addr, nil
}

// forwardedByReplica reports whether a call marked forwarded came from a
// replica. Anyone can send the mark; with authentication only the agent's
// service principal gets a forwarded principal past the interceptor, so a
// call carrying one is a replica's. Without authentication the network is
// trusted (a caller with no principal).
func forwardedByReplica(ctx context.Context, md metadata.MD) bool {
	if _, authed := auth.FromContext(ctx); !authed {
		return true
	}
	return len(md.Get(auth.ForwardedPrincipalHeader)) == 1
}

func stringField(m proto.Message, name protoreflect.Name) string {
	r := m.ProtoReflect()
	fd := r.Descriptor().Fields().ByName(name)
	if fd == nil || fd.Kind() != protoreflect.StringKind || fd.Cardinality() == protoreflect.Repeated {
		return ""
	}
	return r.Get(fd).String()
}

// outgoing is the context of a forwarded call: the caller's deadline and
// principal, this replica's name; the replica's own token goes with the
// connection.
func (s *Service) outgoing(ctx context.Context) context.Context {
	md := metadata.Pairs(mdForwardedBy, s.replica.id)
	if p, ok := auth.FromContext(ctx); ok {
		md.Set(auth.ForwardedPrincipalHeader, p.String())
		if p.TokenID != "" {
			md.Set(auth.ForwardedTokenIDHeader, p.TokenID)
		}
	}
	return metadata.NewOutgoingContext(ctx, md)
}

func (s *Service) forwardUnary(ctx context.Context, addr, method string, req, reply any) error {
	c, err := s.replica.ready(ctx, addr)
	if err != nil {
		return err
	}
	return c.Invoke(s.outgoing(ctx), method, req, reply)
}

// ownerConnectTimeout bounds the wait for a connection to the owner: one
// that is gone (killed, its address unreachable) keeps its lease for a
// TTL, and the caller should hear UNAVAILABLE and retry, by then to the
// replica that took the session over, rather than wait for its deadline.
const ownerConnectTimeout = 2 * time.Second

// ready is the connection to the replica at addr once it is up.
func (r *replica) ready(ctx context.Context, addr string) (*grpc.ClientConn, error) {
	c, err := r.conn(addr)
	if err != nil {
		r.svc.logger.WarnContext(ctx, "agent replica unreachable", "addr", addr, "error", err)
		return nil, domain.New(codes.Unavailable, reasonSessionOwned, "the agent replica serving the session cannot be reached; another takes the session over when its lease ends", grpcerr.RetryAfter(time.Second))
	}
	c.Connect()
	wctx, cancel := context.WithTimeout(ctx, ownerConnectTimeout)
	defer cancel()
	for st := c.GetState(); st != connectivity.Ready; st = c.GetState() {
		if !c.WaitForStateChange(wctx, st) {
			// Its address is the operator's, in the log, never the caller's.
			r.svc.logger.WarnContext(ctx, "agent replica does not answer", "addr", addr)
			return nil, domain.New(codes.Unavailable, reasonSessionOwned,
				"the agent replica serving the session does not answer; another takes the session over when its lease ends",
				grpcerr.RetryAfter(time.Second))
		}
	}
	return c, nil
}

func (s *Service) forwardStream(ctx context.Context, addr, method string, req any, out protoreflect.MessageType, ss grpc.ServerStream) error {
	c, err := s.replica.ready(ctx, addr)
	if err != nil {
		return err
	}
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	cs, err := c.NewStream(s.outgoing(ctx), &grpc.StreamDesc{ServerStreams: true}, method)
	if err != nil {
		return err
	}
	if err := cs.SendMsg(req); err != nil {
		return err
	}
	if err := cs.CloseSend(); err != nil {
		return err
	}
	for {
		msg := out.New().Interface()
		if err := cs.RecvMsg(msg); err != nil {
			ss.SetTrailer(cs.Trailer())
			if errors.Is(err, io.EOF) {
				return nil
			}
			return err
		}
		if err := ss.SendMsg(msg); err != nil {
			return err
		}
	}
}
