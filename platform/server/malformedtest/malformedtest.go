// Package malformedtest checks a running service's answers to bad input,
// for the malformed-input tables of every service: Wire sends each method
// bytes that are not its request, invalid UTF-8 in each string field and an
// undefined number in each enum field; Table runs a service's own cases
// (zero, unknown or out-of-range values). Both assert the code, the
// ErrorInfo reason and domain and the field named, and that no answer is
// INTERNAL.
package malformedtest

import (
	"cmp"
	"context"
	"errors"
	"io"
	"testing"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/encoding"
	grpcproto "google.golang.org/grpc/encoding/proto"
	"google.golang.org/grpc/mem"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/encoding/protowire"
	"google.golang.org/protobuf/reflect/protoreflect"

	"github.com/fabro-sh/fabro-go/platform/grpcerr"
	"github.com/fabro-sh/fabro-go/platform/server"
)

// Case is one bad request of a service's table.
type Case struct {
	Method string // the RPC's short name, "GetSecret"
	Name   string
	Call   func(ctx context.Context) error
	Code   codes.Code // codes.OK: the request is accepted
	Reason string     // ErrorInfo reason; "" with codes.OK
	Domain string     // ErrorInfo domain; "" means the table's
	Field  string     // the BadRequest field that must be named, if any
}

// Table runs cases against the service sd, whose errors are in domain, and
// fails for a method of sd that no case covers.
func Table(t *testing.T, ctx context.Context, sd protoreflect.ServiceDescriptor, domain grpcerr.Domain, cases []Case) {
	t.Helper()
	covered := map[string]bool{}
	for _, c := range cases {
		if sd.Methods().ByName(protoreflect.Name(c.Method)) == nil {
			t.Errorf("case %q: %s has no method %q", c.Name, sd.FullName(), c.Method)
		}
		covered[c.Method] = true
		t.Run(c.Method+"/"+c.Name, func(t *testing.T) {
			err := c.Call(ctx)
			Check(t, err, c.Code, cmp.Or(c.Domain, string(domain)), c.Reason, c.Field)
		})
	}
	for i := range sd.Methods().Len() {
		if m := sd.Methods().Get(i); !covered[string(m.Name())] {
			t.Errorf("%s has no malformed-input case", m.FullName())
		}
	}
}

// Check asserts err's code, ErrorInfo and BadRequest field; INTERNAL and
// UNKNOWN always fail.
func Check(t *testing.T, err error, code codes.Code, domain, reason, field string) {
	t.Helper()
	got := status.Code(err)
	if got == codes.Internal || got == codes.Unknown {
		t.Fatalf("bad input answered %v: %v", got, err)
	}
	if got != code {
		t.Fatalf("code = %v, want %v (err %v)", got, code, err)
	}
	if code == codes.OK {
		return
	}
	info := grpcerr.InfoOf(err)
	if info == nil {
		t.Fatalf("no ErrorInfo: %v", err)
	}
	if info.GetReason() != reason || info.GetDomain() != domain {
		t.Errorf("ErrorInfo = %s/%s, want %s/%s (err %v)", info.GetDomain(), info.GetReason(), domain, reason, err)
	}
	if field == "" {
		return
	}
	for _, v := range grpcerr.ViolationsOf(err) {
		if v.GetField() == field {
			return
		}
	}
	t.Errorf("BadRequest = %v, want field %q named (err %v)", grpcerr.ViolationsOf(err), field, err)
}

// Wire sends every method of sd, through conn with the context ctxFor gives
// for the method's short name (carrying a credential the method admits), bytes that are not its request, invalid UTF-8 in each
// string field of the request, and 99 in each enum field reachable from it
// (nested messages and lists included, three levels deep). Each must get
// INVALID_ARGUMENT from the server runtime naming the field.
func Wire(t *testing.T, ctxFor func(method string) context.Context, conn *grpc.ClientConn, sd protoreflect.ServiceDescriptor) {
	t.Helper()
	for i := range sd.Methods().Len() {
		md := sd.Methods().Get(i)
		type wireCase struct {
			name, reason, field string
			body                []byte
		}
		cases := []wireCase{{"garbage", grpcerr.ReasonMalformedRequest, "", []byte{0xff, 0xff, 0xff, 0xff}}}
		for _, f := range badStrings(md.Input(), "", 0) {
			cases = append(cases, wireCase{"invalid UTF-8 in " + f.path, grpcerr.ReasonMalformedRequest, f.path, f.body})
		}
		for _, f := range badEnums(md.Input(), "", 0) {
			cases = append(cases, wireCase{"unknown enum in " + f.path, server.ReasonUnknownEnumValue, f.path, f.body})
		}
		for _, c := range cases {
			t.Run(string(md.Name())+"/"+c.name, func(t *testing.T) {
				err := call(ctxFor(string(md.Name())), conn, md, c.body)
				Check(t, err, codes.InvalidArgument, string(server.Domain), c.reason, c.field)
			})
		}
	}
}

type badField struct {
	path string
	body []byte
}

// badStrings builds, for each string field (in messages up to depth 3), the
// bytes of a request holding invalid UTF-8 there.
func badStrings(md protoreflect.MessageDescriptor, prefix string, depth int) []badField {
	return fieldsLike(md, prefix, depth, protoreflect.StringKind, func(fd protoreflect.FieldDescriptor) []byte {
		return protowire.AppendString(protowire.AppendTag(nil, fd.Number(), protowire.BytesType), "bad\xff")
	})
}

// badEnums does the same with 99 in each enum field (none defines 99).
func badEnums(md protoreflect.MessageDescriptor, prefix string, depth int) []badField {
	return fieldsLike(md, prefix, depth, protoreflect.EnumKind, func(fd protoreflect.FieldDescriptor) []byte {
		if fd.Enum().Values().ByNumber(99) != nil {
			return nil
		}
		return protowire.AppendVarint(protowire.AppendTag(nil, fd.Number(), protowire.VarintType), 99)
	})
}

func fieldsLike(md protoreflect.MessageDescriptor, prefix string, depth int, kind protoreflect.Kind, leaf func(protoreflect.FieldDescriptor) []byte) []badField {
	var out []badField
	fields := md.Fields()
	for i := range fields.Len() {
		fd := fields.Get(i)
		if fd.IsMap() {
			continue // map keys and values: covered by platform/server's own test
		}
		path := prefix + string(fd.Name())
		if fd.IsList() {
			path += "[0]"
		}
		switch {
		case fd.Kind() == kind:
			if b := leaf(fd); b != nil {
				out = append(out, badField{path, b})
			}
		case fd.Kind() == protoreflect.MessageKind && depth < 3 && fd.Message().FullName().Parent() != "google.protobuf":
			for _, inner := range fieldsLike(fd.Message(), path+".", depth+1, kind, leaf) {
				b := protowire.AppendBytes(protowire.AppendTag(nil, fd.Number(), protowire.BytesType), inner.body)
				out = append(out, badField{inner.path, b})
			}
		}
	}
	return out
}

// call sends body as the one request message of md and returns the RPC's
// error.
func call(ctx context.Context, conn *grpc.ClientConn, md protoreflect.MethodDescriptor, body []byte) error {
	method := "/" + string(md.Parent().FullName()) + "/" + string(md.Name())
	opt := grpc.ForceCodecV2(rawCodec{})
	if !md.IsStreamingClient() && !md.IsStreamingServer() {
		var out []byte
		return conn.Invoke(ctx, method, &body, &out, opt)
	}
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	cs, err := conn.NewStream(ctx, &grpc.StreamDesc{ClientStreams: md.IsStreamingClient(), ServerStreams: md.IsStreamingServer()}, method, opt)
	if err != nil {
		return err
	}
	if err := cs.SendMsg(&body); err != nil && !errors.Is(err, io.EOF) {
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
}

// rawCodec puts bytes on the wire as they are.
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
