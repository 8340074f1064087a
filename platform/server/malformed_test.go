package server

import (
	"context"
	"errors"
	"io"
	"log/slog"
	"net/http"
	"path/filepath"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"github.com/grpc-ecosystem/grpc-gateway/v2/runtime"
	spb "google.golang.org/genproto/googleapis/rpc/status"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/encoding"
	grpcproto "google.golang.org/grpc/encoding/proto"
	"google.golang.org/grpc/mem"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/encoding/protojson"
	"google.golang.org/protobuf/encoding/protowire"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/reflect/protodesc"
	"google.golang.org/protobuf/reflect/protoreflect"
	"google.golang.org/protobuf/types/descriptorpb"
	"google.golang.org/protobuf/types/dynamicpb"

	vaultv1 "github.com/fabro-sh/fabro-go/gen/fabro/vault/v1"
	"github.com/fabro-sh/fabro-go/platform/auth"
	"github.com/fabro-sh/fabro-go/platform/grpcerr"
)

// The test service is built from a descriptor here, so that it has every
// shape the checks must reach: an enum singular, repeated, as a map value,
// nested once and in a repeated message, and strings at each level.
//
//	enum Level { LEVEL_UNSPECIFIED = 0; LEVEL_LOW = 1; LEVEL_HIGH = 2; }
//	message Inner { Level level = 1; string text = 2; oneof choice { Level picked = 3; Inner nested = 4; } }
//	message Req {
//	  string name = 1; Level level = 2; repeated Level levels = 3;
//	  map<string, Level> by_name = 4; Inner inner = 5; repeated Inner inners = 6;
//	  map<string, string> labels = 7; map<string, Inner> inner_by_name = 8;
//	}
//	message Resp { string name = 1; int32 count = 2; }
//	service Check { rpc Echo(Req) returns (Resp); rpc Collect(stream Req) returns (Resp);
//	  rpc Watch(Req) returns (stream Resp); }
var testFile = func() protoreflect.FileDescriptor {
	s := proto.String
	lbl := func(l descriptorpb.FieldDescriptorProto_Label) *descriptorpb.FieldDescriptorProto_Label { return &l }
	typ := func(t descriptorpb.FieldDescriptorProto_Type) *descriptorpb.FieldDescriptorProto_Type { return &t }
	opt, rep := lbl(descriptorpb.FieldDescriptorProto_LABEL_OPTIONAL), lbl(descriptorpb.FieldDescriptorProto_LABEL_REPEATED)
	str, enum, msg := typ(descriptorpb.FieldDescriptorProto_TYPE_STRING), typ(descriptorpb.FieldDescriptorProto_TYPE_ENUM), typ(descriptorpb.FieldDescriptorProto_TYPE_MESSAGE)
	field := func(name string, n int32, l *descriptorpb.FieldDescriptorProto_Label, t *descriptorpb.FieldDescriptorProto_Type, tn string) *descriptorpb.FieldDescriptorProto {
		f := &descriptorpb.FieldDescriptorProto{Name: s(name), Number: proto.Int32(n), Label: l, Type: t, JsonName: s(name)}
		if tn != "" {
			f.TypeName = s(tn)
		}
		return f
	}
	inOneof := func(f *descriptorpb.FieldDescriptorProto) *descriptorpb.FieldDescriptorProto {
		f.OneofIndex = proto.Int32(0)
		return f
	}
	entry := func(name string, vt *descriptorpb.FieldDescriptorProto_Type, vtn string) *descriptorpb.DescriptorProto {
		return &descriptorpb.DescriptorProto{Name: s(name), Options: &descriptorpb.MessageOptions{MapEntry: proto.Bool(true)},
			Field: []*descriptorpb.FieldDescriptorProto{field("key", 1, opt, str, ""), field("value", 2, opt, vt, vtn)}}
	}
	fdp := &descriptorpb.FileDescriptorProto{
		Name: s("fabrotest/check.proto"), Package: s("fabrotest.v1"), Syntax: s("proto3"),
		EnumType: []*descriptorpb.EnumDescriptorProto{{Name: s("Level"), Value: []*descriptorpb.EnumValueDescriptorProto{
			{Name: s("LEVEL_UNSPECIFIED"), Number: proto.Int32(0)}, {Name: s("LEVEL_LOW"), Number: proto.Int32(1)}, {Name: s("LEVEL_HIGH"), Number: proto.Int32(2)},
		}}},
		MessageType: []*descriptorpb.DescriptorProto{
			{Name: s("Inner"), Field: []*descriptorpb.FieldDescriptorProto{
				field("level", 1, opt, enum, ".fabrotest.v1.Level"), field("text", 2, opt, str, ""),
				inOneof(field("picked", 3, opt, enum, ".fabrotest.v1.Level")), inOneof(field("nested", 4, opt, msg, ".fabrotest.v1.Inner")),
			}, OneofDecl: []*descriptorpb.OneofDescriptorProto{{Name: s("choice")}}},
			{Name: s("Req"), Field: []*descriptorpb.FieldDescriptorProto{
				field("name", 1, opt, str, ""), field("level", 2, opt, enum, ".fabrotest.v1.Level"),
				field("levels", 3, rep, enum, ".fabrotest.v1.Level"), field("by_name", 4, rep, msg, ".fabrotest.v1.Req.ByNameEntry"),
				field("inner", 5, opt, msg, ".fabrotest.v1.Inner"), field("inners", 6, rep, msg, ".fabrotest.v1.Inner"),
				field("labels", 7, rep, msg, ".fabrotest.v1.Req.LabelsEntry"), field("inner_by_name", 8, rep, msg, ".fabrotest.v1.Req.InnerByNameEntry"),
			}, NestedType: []*descriptorpb.DescriptorProto{
				entry("ByNameEntry", enum, ".fabrotest.v1.Level"), entry("LabelsEntry", str, ""), entry("InnerByNameEntry", msg, ".fabrotest.v1.Inner"),
			}},
			{Name: s("Resp"), Field: []*descriptorpb.FieldDescriptorProto{field("name", 1, opt, str, ""), field("count", 2, opt, typ(descriptorpb.FieldDescriptorProto_TYPE_INT32), "")}},
		},
	}
	fd, err := protodesc.NewFile(fdp, nil)
	if err != nil {
		panic(err)
	}
	return fd
}()

var (
	reqDesc  = testFile.Messages().ByName("Req")
	respDesc = testFile.Messages().ByName("Resp")
)

// checkService answers like a generated server: Echo returns the request's
// name, Collect counts the requests, Watch sends the name back twice. Every
// call that reaches it is counted: a refused request must not.
type checkService struct{ calls atomic.Int32 }

func (c *checkService) resp(name string, count int) *dynamicpb.Message {
	m := dynamicpb.NewMessage(respDesc)
	m.Set(respDesc.Fields().ByName("name"), protoreflect.ValueOfString(name))
	m.Set(respDesc.Fields().ByName("count"), protoreflect.ValueOfInt32(int32(count)))
	return m
}

func reqName(m proto.Message) string {
	return m.ProtoReflect().Get(reqDesc.Fields().ByName("name")).String()
}

func (c *checkService) Name() string { return "fabrotest.v1.Check" }
func (c *checkService) RegisterGRPC(s grpc.ServiceRegistrar) {
	s.RegisterService(&grpc.ServiceDesc{
		ServiceName: "fabrotest.v1.Check",
		HandlerType: (*any)(nil),
		Methods: []grpc.MethodDesc{{MethodName: "Echo", Handler: func(srv any, ctx context.Context, dec func(any) error, ic grpc.UnaryServerInterceptor) (any, error) {
			in := dynamicpb.NewMessage(reqDesc)
			if err := dec(in); err != nil {
				return nil, err
			}
			h := func(ctx context.Context, req any) (any, error) {
				c.calls.Add(1)
				return c.resp(reqName(req.(proto.Message)), 1), nil
			}
			return ic(ctx, in, &grpc.UnaryServerInfo{FullMethod: "/fabrotest.v1.Check/Echo"}, h)
		}}},
		Streams: []grpc.StreamDesc{
			{StreamName: "Collect", ClientStreams: true, Handler: func(_ any, ss grpc.ServerStream) error {
				c.calls.Add(1)
				var names []string
				for {
					in := dynamicpb.NewMessage(reqDesc)
					err := ss.RecvMsg(in)
					if errors.Is(err, io.EOF) {
						return ss.SendMsg(c.resp(strings.Join(names, ","), len(names)))
					}
					if err != nil {
						return err
					}
					names = append(names, reqName(in))
				}
			}},
			{StreamName: "Watch", ServerStreams: true, Handler: func(_ any, ss grpc.ServerStream) error {
				in := dynamicpb.NewMessage(reqDesc)
				if err := ss.RecvMsg(in); err != nil {
					return err
				}
				c.calls.Add(1)
				for i := range 2 {
					if err := ss.SendMsg(c.resp(reqName(in), i)); err != nil {
						return err
					}
				}
				return nil
			}},
		},
	}, c)
}
func (c *checkService) RegisterGateway(context.Context, *runtime.ServeMux, *grpc.ClientConn) error {
	return nil
}

// rawCodec sends bytes as they are: the client can put anything on the wire.
type rawCodec struct{}

func (rawCodec) Marshal(v any) (mem.BufferSlice, error) {
	if b, ok := v.(*[]byte); ok {
		return mem.BufferSlice{mem.SliceBuffer(*b)}, nil
	}
	return encoding.GetCodecV2(grpcproto.Name).Marshal(v)
}
func (rawCodec) Unmarshal(data mem.BufferSlice, v any) error {
	if b, ok := v.(*[]byte); ok {
		*b = data.Materialize()
		return nil
	}
	return encoding.GetCodecV2(grpcproto.Name).Unmarshal(data, v)
}
func (rawCodec) Name() string { return grpcproto.Name }

// wire builds request bytes field by field.
type wire []byte

func (w wire) str(n protowire.Number, s string) wire {
	return protowire.AppendString(protowire.AppendTag(w, n, protowire.BytesType), s)
}
func (w wire) varint(n protowire.Number, v uint64) wire {
	return protowire.AppendVarint(protowire.AppendTag(w, n, protowire.VarintType), v)
}
func (w wire) msg(n protowire.Number, m wire) wire {
	return protowire.AppendBytes(protowire.AppendTag(w, n, protowire.BytesType), m)
}

func TestMalformedRequests(t *testing.T) {
	svc := &checkService{}
	srv, err := Start(t.Context(), Config{GRPCAddr: "127.0.0.1:0", NoAuth: true}, slog.New(slog.NewTextHandler(t.Output(), nil)), svc)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		_ = srv.Shutdown(ctx)
	})
	conn, err := grpc.NewClient(srv.GRPCAddr(), grpc.WithTransportCredentials(insecure.NewCredentials()),
		grpc.WithDefaultCallOptions(grpc.ForceCodecV2(rawCodec{})))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = conn.Close() })

	ok := wire(nil).str(1, "fine").varint(2, 2).varint(3, 1).msg(5, wire(nil).varint(1, 1).str(2, "ok"))
	tests := []struct {
		name       string
		body       wire
		wantReason string   // "" means accepted
		wantFields []string // BadRequest violations, in order
	}{
		{name: "valid", body: ok},
		{name: "empty", body: wire{}},
		{name: "unknown field kept out of the way", body: wire(nil).str(1, "x").varint(99, 5)},
		{name: "garbage bytes", body: wire{0xff, 0xff, 0xff, 0xff}, wantReason: grpcerr.ReasonMalformedRequest},
		{name: "truncated length", body: wire{0x0a, 0x10, 'a'}, wantReason: grpcerr.ReasonMalformedRequest},
		{name: "field number zero", body: wire{0x00, 0x01}, wantReason: grpcerr.ReasonMalformedRequest},
		{name: "invalid UTF-8 at the top", body: wire(nil).str(1, "a\xffb"), wantReason: grpcerr.ReasonMalformedRequest, wantFields: []string{"name"}},
		{name: "invalid UTF-8 nested", body: wire(nil).msg(5, wire(nil).str(2, "\xc3")), wantReason: grpcerr.ReasonMalformedRequest, wantFields: []string{"inner.text"}},
		{name: "invalid UTF-8 in a repeated message", body: wire(nil).msg(6, wire(nil).str(2, "ok")).msg(6, wire(nil).str(2, "\xfe")),
			wantReason: grpcerr.ReasonMalformedRequest, wantFields: []string{"inners[1].text"}},
		{name: "invalid UTF-8 in a map value", body: wire(nil).msg(7, wire(nil).str(1, "K").str(2, "\xff")),
			wantReason: grpcerr.ReasonMalformedRequest, wantFields: []string{`labels["K"]`}},
		{name: "invalid UTF-8 in a map key", body: wire(nil).msg(7, wire(nil).str(1, "\xff").str(2, "v")),
			wantReason: grpcerr.ReasonMalformedRequest, wantFields: []string{"labels"}},
		{name: "invalid UTF-8 in a map of messages", body: wire(nil).msg(8, wire(nil).str(1, "k").msg(2, wire(nil).str(2, "\xff"))),
			wantReason: grpcerr.ReasonMalformedRequest, wantFields: []string{`inner_by_name["k"].text`}},
		{name: "unknown enum", body: wire(nil).varint(2, 99), wantReason: ReasonUnknownEnumValue, wantFields: []string{"level"}},
		{name: "negative enum", body: wire(nil).varint(2, uint64(1<<64-1)), wantReason: ReasonUnknownEnumValue, wantFields: []string{"level"}},
		{name: "unknown enum in a repeated field", body: wire(nil).varint(3, 1).varint(3, 77), wantReason: ReasonUnknownEnumValue, wantFields: []string{"levels[1]"}},
		{name: "unknown enum as a map value", body: wire(nil).msg(4, wire(nil).str(1, "a").varint(2, 55)), wantReason: ReasonUnknownEnumValue, wantFields: []string{`by_name["a"]`}},
		{name: "unknown enum nested", body: wire(nil).msg(5, wire(nil).varint(1, 42)), wantReason: ReasonUnknownEnumValue, wantFields: []string{"inner.level"}},
		{name: "unknown enum in a repeated message", body: wire(nil).msg(6, wire(nil).varint(1, 1)).msg(6, wire(nil).varint(1, 9)),
			wantReason: ReasonUnknownEnumValue, wantFields: []string{"inners[1].level"}},
		{name: "unknown enum in a map of messages", body: wire(nil).msg(8, wire(nil).str(1, "k").msg(2, wire(nil).varint(1, 3))),
			wantReason: ReasonUnknownEnumValue, wantFields: []string{`inner_by_name["k"].level`}},
		{name: "unknown enum in a oneof", body: wire(nil).msg(5, wire(nil).varint(3, 5)), wantReason: ReasonUnknownEnumValue, wantFields: []string{"inner.picked"}},
		{name: "unknown enum below a oneof, recursively", body: wire(nil).msg(5, wire(nil).msg(4, wire(nil).msg(4, wire(nil).varint(1, 6)))),
			wantReason: ReasonUnknownEnumValue, wantFields: []string{"inner.nested.nested.level"}},
		{name: "valid oneof", body: wire(nil).msg(5, wire(nil).varint(3, 2))},
		{name: "every unknown enum is named", body: wire(nil).varint(2, 7).msg(5, wire(nil).varint(1, 8)),
			wantReason: ReasonUnknownEnumValue, wantFields: []string{"level", "inner.level"}},
	}
	methods := []struct {
		name string
		call func(ctx context.Context, body wire) error
	}{
		{"unary", func(ctx context.Context, body wire) error {
			in, out := []byte(body), []byte(nil)
			return conn.Invoke(ctx, "/fabrotest.v1.Check/Echo", &in, &out)
		}},
		{"client stream", func(ctx context.Context, body wire) error {
			cs, err := conn.NewStream(ctx, &grpc.StreamDesc{ClientStreams: true}, "/fabrotest.v1.Check/Collect")
			if err != nil {
				return err
			}
			first, in := []byte(ok), []byte(body)
			if err := cs.SendMsg(&first); err != nil { // a good message first: the bad one is refused mid-stream
				return err
			}
			if err := cs.SendMsg(&in); err != nil && !errors.Is(err, io.EOF) {
				return err
			}
			if err := cs.CloseSend(); err != nil {
				return err
			}
			var out []byte
			return cs.RecvMsg(&out)
		}},
		{"server stream", func(ctx context.Context, body wire) error {
			cs, err := conn.NewStream(ctx, &grpc.StreamDesc{ServerStreams: true}, "/fabrotest.v1.Check/Watch")
			if err != nil {
				return err
			}
			in := []byte(body)
			if err := cs.SendMsg(&in); err != nil {
				return err
			}
			if err := cs.CloseSend(); err != nil {
				return err
			}
			for {
				var out []byte
				if err := cs.RecvMsg(&out); err != nil {
					if errors.Is(err, io.EOF) {
						return nil
					}
					return err
				}
			}
		}},
	}
	for _, m := range methods {
		for _, tt := range tests {
			t.Run(m.name+"/"+tt.name, func(t *testing.T) {
				before := svc.calls.Load()
				err := m.call(t.Context(), tt.body)
				if tt.wantReason == "" {
					if err != nil {
						t.Fatalf("refused a valid request: %v", err)
					}
					return
				}
				if got := status.Code(err); got != codes.InvalidArgument {
					t.Fatalf("code = %v, want InvalidArgument (err %v)", got, err)
				}
				info := grpcerr.InfoOf(err)
				if info.GetDomain() != string(Domain) || info.GetReason() != tt.wantReason {
					t.Errorf("ErrorInfo = %v, want %s %s", info, Domain, tt.wantReason)
				}
				if info.GetMetadata()["message"] != "fabrotest.v1.Req" {
					t.Errorf("metadata = %v, want the message named", info.GetMetadata())
				}
				var fields []string
				for _, v := range grpcerr.ViolationsOf(err) {
					fields = append(fields, v.GetField())
				}
				if diff := cmp.Diff(tt.wantFields, fields); diff != "" {
					t.Errorf("violations (-want +got):\n%s", diff)
				}
				if len(tt.wantFields) > 0 && info.GetMetadata()["field"] != tt.wantFields[0] {
					t.Errorf("metadata field = %q, want %q", info.GetMetadata()["field"], tt.wantFields[0])
				}
				// Unary and server-streaming handlers get a request only
				// once it passed; Collect starts before its messages.
				if m.name != "client stream" && svc.calls.Load() != before {
					t.Errorf("the handler ran on a refused request")
				}
			})
		}
	}
}

// A JSON body that is not the message gets INVALID_ARGUMENT (400) with a
// google.rpc.Status naming the reason, never 500.
func TestMalformedRESTBody(t *testing.T) {
	h := start(t, Config{HTTPAddr: "127.0.0.1:0"})
	tests := []struct {
		name, body string
		wantReason string
		wantField  string
	}{
		{"not JSON", `{"value": `, grpcerr.ReasonMalformedRequest, ""},
		{"wrong type", `{"value": 12}`, grpcerr.ReasonMalformedRequest, ""},
		{"unknown field", `{"valu": "x"}`, grpcerr.ReasonMalformedRequest, "valu"},
		{"invalid UTF-8", "{\"value\": \"a\xffb\"}", grpcerr.ReasonMalformedRequest, ""},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			req, err := http.NewRequestWithContext(t.Context(), http.MethodPut, "http://"+h.srv.HTTPAddr()+"/v1/secrets/OK", strings.NewReader(tt.body))
			if err != nil {
				t.Fatal(err)
			}
			req.Header.Set("Content-Type", "application/json")
			resp, err := http.DefaultClient.Do(req)
			if err != nil {
				t.Fatal(err)
			}
			defer resp.Body.Close()
			b, _ := io.ReadAll(resp.Body)
			if resp.StatusCode != http.StatusBadRequest {
				t.Fatalf("status = %d, want 400: %s", resp.StatusCode, b)
			}
			err = statusFromJSON(t, b)
			if status.Code(err) != codes.InvalidArgument || grpcerr.ReasonOf(err) != tt.wantReason {
				t.Fatalf("status = %v (%s), want InvalidArgument %s", err, grpcerr.ReasonOf(err), tt.wantReason)
			}
			if tt.wantField != "" {
				v := grpcerr.ViolationsOf(err)
				if len(v) != 1 || v[0].GetField() != tt.wantField {
					t.Errorf("violations = %v, want %s", v, tt.wantField)
				}
			}
		})
	}
}

func statusFromJSON(t *testing.T, b []byte) error {
	t.Helper()
	var st spb.Status
	if err := protojson.Unmarshal(b, &st); err != nil {
		t.Fatalf("body is not a google.rpc.Status: %v: %s", err, b)
	}
	return status.FromProto(&st).Err()
}

// A method no service has is UNIMPLEMENTED with ErrorInfo, like every
// other answer; so is a registered method its server does not implement.
func TestUnimplementedCarriesErrorInfo(t *testing.T) {
	h := start(t, Config{})
	in, out := []byte{}, []byte(nil)
	err := h.conn.Invoke(t.Context(), "/fabro.nope.v1.Nope/Do", &in, &out, grpc.ForceCodecV2(rawCodec{}))
	if status.Code(err) != codes.Unimplemented || grpcerr.ReasonOf(err) != "UNKNOWN_METHOD" || grpcerr.InfoOf(err).GetDomain() != string(Domain) {
		t.Errorf("unknown method: %v (%v)", err, grpcerr.InfoOf(err))
	}
	_, err = h.vaultClient().ListSecrets(t.Context(), &vaultv1.ListSecretsRequest{})
	if status.Code(err) != codes.Unimplemented || grpcerr.ReasonOf(err) != "UNIMPLEMENTED" {
		t.Errorf("unimplemented method: %v (%v)", err, grpcerr.InfoOf(err))
	}
}

// Over REST an enum given by number passes protojson; the request check
// refuses an undefined one like over gRPC, and a name that is no value is
// refused by the gateway's decoder: both 400 with the field named.
func TestUnknownEnumOverREST(t *testing.T) {
	store := auth.OpenStore(filepath.Join(t.TempDir(), "tokens.json"))
	srv, err := Start(t.Context(), Config{GRPCAddr: "127.0.0.1:0", HTTPAddr: "127.0.0.1:0", NoAuth: true}, slog.New(slog.DiscardHandler), auth.NewTokenService(store))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		_ = srv.Shutdown(ctx)
	})
	tests := []struct {
		body, reason, domain, field string
	}{
		{`{"name": "ci", "role": 99}`, ReasonUnknownEnumValue, string(Domain), "role"},
		{`{"name": "ci", "role": "ROLE_GOD"}`, grpcerr.ReasonMalformedRequest, string(Domain), "role"},
		{`{"name": "ci"}`, grpcerr.ReasonInvalidArgument, auth.ErrorDomain, "role"}, // zero: ROLE_UNSPECIFIED
	}
	for _, tt := range tests {
		t.Run(tt.body, func(t *testing.T) {
			req, err := http.NewRequestWithContext(t.Context(), http.MethodPost, "http://"+srv.HTTPAddr()+"/v1/tokens", strings.NewReader(tt.body))
			if err != nil {
				t.Fatal(err)
			}
			req.Header.Set("Content-Type", "application/json")
			resp, err := http.DefaultClient.Do(req)
			if err != nil {
				t.Fatal(err)
			}
			defer resp.Body.Close()
			b, _ := io.ReadAll(resp.Body)
			if resp.StatusCode != http.StatusBadRequest {
				t.Fatalf("status = %d, want 400: %s", resp.StatusCode, b)
			}
			err = statusFromJSON(t, b)
			if info := grpcerr.InfoOf(err); info.GetReason() != tt.reason || info.GetDomain() != tt.domain {
				t.Errorf("ErrorInfo = %v, want %s/%s", info, tt.domain, tt.reason)
			}
			if v := grpcerr.ViolationsOf(err); len(v) != 1 || v[0].GetField() != tt.field {
				t.Errorf("violations = %v, want %s", v, tt.field)
			}
		})
	}
}
