package server

import (
	"bytes"
	"context"
	"fmt"
	"strconv"
	"strings"
	"unicode/utf8"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/encoding"
	grpcproto "google.golang.org/grpc/encoding/proto"
	"google.golang.org/grpc/mem"
	"google.golang.org/protobuf/encoding/protowire"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/reflect/protoreflect"

	"github.com/fabro-sh/fabro-go/platform/grpcerr"
)

// Domain is the google.rpc.ErrorInfo domain of the errors the server runtime
// itself returns, before a handler runs (malformed requests, unknown enum
// values).
const Domain grpcerr.Domain = "platform.fabro.dev"

// ReasonUnknownEnumValue marks an enum field holding a number its enum does
// not define; the field is named in the metadata and in BadRequest.
const ReasonUnknownEnumValue = "UNKNOWN_ENUM_VALUE"

// Why a codec: grpc-go answers a request its codec cannot decode with
// INTERNAL ("grpc: failed to unmarshal the received message", rpc_util.go
// recv), whatever error the codec returns, and for a unary RPC it does so
// inside the generated handler before any interceptor runs. A client's bad
// bytes are not our bug, so the server's codec never fails a decode: it
// leaves the message empty and marked, and the check interceptor (see
// checkMessage) answers INVALID_ARGUMENT MALFORMED_REQUEST. The status a
// handler or interceptor returns is the one grpc sends.

// malformedMark starts the unknown-field bytes of a message that failed to
// decode, followed by the description. Field number 0 is invalid on the
// wire, so no successful decode leaves unknown bytes starting with it.
var malformedMark = []byte{0x00, 0x00, 'f', 'a', 'b', 'r', 'o', ':', 'm', 'a', 'l', 'f', 'o', 'r', 'm', 'e', 'd', ':'}

// lenientCodec is grpc's proto codec whose Unmarshal marks instead of
// failing, and refuses (marks, undecoded) a request over its message's
// limit (limits.go).
type lenientCodec struct {
	encoding.CodecV2
	limits map[protoreflect.FullName]int
}

func newLenientCodec(limits map[protoreflect.FullName]int) lenientCodec {
	return lenientCodec{encoding.GetCodecV2(grpcproto.Name), limits}
}

func (c lenientCodec) Unmarshal(data mem.BufferSlice, v any) error {
	if m, ok := v.(proto.Message); ok && len(c.limits) > 0 {
		if limit, ok := c.limits[m.ProtoReflect().Descriptor().FullName()]; ok && data.Len() > limit {
			markTooLarge(m, data.Len(), limit)
			return nil
		}
	}
	err := c.CodecV2.Unmarshal(data, v)
	if err == nil {
		return nil
	}
	m, ok := v.(proto.Message)
	if !ok {
		return err // not ours to judge: grpc's INTERNAL stands
	}
	field := ""
	if utf8Err(err) {
		field = badUTF8Field(data.Materialize(), m.ProtoReflect().Descriptor(), "")
	}
	proto.Reset(m)
	mark := append(bytes.Clone(malformedMark), field...)
	mark = append(mark, 0)
	mark = append(mark, err.Error()...)
	m.ProtoReflect().SetUnknown(mark)
	return nil
}

// utf8Err reports a protobuf decode error for invalid UTF-8 (its text is
// all protobuf-go gives: "string field contains invalid UTF-8", or "field
// X contains invalid UTF-8").
func utf8Err(err error) bool {
	return strings.Contains(err.Error(), "invalid UTF-8")
}

// malformed returns the INVALID_ARGUMENT for a message the codec marked, or
// nil.
func malformed(req any) error {
	m, ok := req.(proto.Message)
	if !ok {
		return nil
	}
	u := m.ProtoReflect().GetUnknown()
	if !bytes.HasPrefix(u, malformedMark) {
		return nil
	}
	field, cause, _ := bytes.Cut(u[len(malformedMark):], []byte{0})
	name := string(m.ProtoReflect().Descriptor().FullName())
	if len(field) > 0 {
		msg := fmt.Sprintf("field %s of %s is not valid UTF-8", field, name)
		return Domain.New(codes.InvalidArgument, grpcerr.ReasonMalformedRequest, msg,
			grpcerr.Meta("message", name, "field", string(field)), grpcerr.Field(string(field), "not valid UTF-8"))
	}
	return Domain.New(codes.InvalidArgument, grpcerr.ReasonMalformedRequest,
		fmt.Sprintf("the request is not a valid %s: %s", name, cause), grpcerr.Meta("message", name))
}

// badUTF8Field finds the path of the first string field in b whose bytes are
// not UTF-8 ("messages[1].content", "env[\"KEY\"]"), or "".
func badUTF8Field(b []byte, md protoreflect.MessageDescriptor, prefix string) string {
	seen := map[protowire.Number]int{}
	for len(b) > 0 {
		num, typ, n := protowire.ConsumeTag(b)
		if n < 0 {
			return ""
		}
		b = b[n:]
		if typ != protowire.BytesType {
			n = protowire.ConsumeFieldValue(num, typ, b)
			if n < 0 {
				return ""
			}
			b = b[n:]
			continue
		}
		v, n := protowire.ConsumeBytes(b)
		if n < 0 {
			return ""
		}
		b = b[n:]
		fd := md.Fields().ByNumber(num)
		if fd == nil {
			continue
		}
		idx := seen[num]
		seen[num]++
		path := prefix + string(fd.Name())
		switch {
		case fd.IsMap():
			if p := badUTF8MapEntry(v, fd, path); p != "" {
				return p
			}
		case fd.IsList():
			path += "[" + strconv.Itoa(idx) + "]"
			fallthrough
		default:
			switch fd.Kind() {
			case protoreflect.StringKind:
				if !utf8.Valid(v) {
					return path
				}
			case protoreflect.MessageKind, protoreflect.GroupKind:
				if p := badUTF8Field(v, fd.Message(), path+"."); p != "" {
					return p
				}
			}
		}
	}
	return ""
}

// badUTF8MapEntry checks one map entry: a bad key names the map, a bad value
// names the entry by its key.
func badUTF8MapEntry(b []byte, fd protoreflect.FieldDescriptor, path string) string {
	var key []byte
	var keyOK = true
	var val []byte
	for len(b) > 0 {
		num, typ, n := protowire.ConsumeTag(b)
		if n < 0 {
			return ""
		}
		b = b[n:]
		if typ != protowire.BytesType {
			if n = protowire.ConsumeFieldValue(num, typ, b); n < 0 {
				return ""
			}
			b = b[n:]
			continue
		}
		v, n := protowire.ConsumeBytes(b)
		if n < 0 {
			return ""
		}
		b = b[n:]
		switch num {
		case 1:
			key = v
			keyOK = fd.MapKey().Kind() != protoreflect.StringKind || utf8.Valid(v)
		case 2:
			val = v
		}
	}
	if !keyOK {
		return path
	}
	entry := path + "[" + strconv.Quote(string(key)) + "]"
	switch fd.MapValue().Kind() {
	case protoreflect.StringKind:
		if !utf8.Valid(val) {
			return entry
		}
	case protoreflect.MessageKind:
		return badUTF8Field(val, fd.MapValue().Message(), entry+".")
	}
	return ""
}

// unknownMethod answers a method no service registered: UNIMPLEMENTED with
// ErrorInfo, where grpc's own answer has none.
func unknownMethod(_ any, ss grpc.ServerStream) error {
	method, _ := grpc.MethodFromServerStream(ss)
	return Domain.New(codes.Unimplemented, "UNKNOWN_METHOD", "this server has no method "+method, grpcerr.Meta("method", method))
}

// checkedStream checks every message a client stream sends.
type checkedStream struct {
	grpc.ServerStream
	check func(any) error
}

func (s *checkedStream) RecvMsg(m any) error {
	if err := s.ServerStream.RecvMsg(m); err != nil {
		return err
	}
	return s.check(m)
}

// checkUnary refuses a malformed request or one with an unknown enum value
// before the handler sees it.
func checkUnary(ctx context.Context, req any, _ *grpc.UnaryServerInfo, handler grpc.UnaryHandler) (any, error) {
	if err := checkMessage(req); err != nil {
		return nil, err
	}
	return handler(ctx, req)
}

// checkStream does the same for every message received on a stream: the
// handler's RecvMsg returns the INVALID_ARGUMENT, which the handler returns.
func checkStream(srv any, ss grpc.ServerStream, _ *grpc.StreamServerInfo, handler grpc.StreamHandler) error {
	return handler(srv, &checkedStream{ServerStream: ss, check: checkMessage})
}

// checkMessage is the request check every service gets.
func checkMessage(req any) error {
	m, ok := req.(proto.Message)
	if !ok {
		return nil
	}
	if err := tooLarge(m); err != nil {
		return err
	}
	if err := malformed(req); err != nil {
		return err
	}
	return unknownEnums(m.ProtoReflect())
}
