package server

import (
	"bytes"
	"fmt"
	"strconv"
	"strings"

	"google.golang.org/grpc/codes"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/reflect/protoreflect"
	"google.golang.org/protobuf/reflect/protoregistry"

	"github.com/fabro-sh/fabro-go/platform/grpcerr"
)

// ReasonRequestTooLarge marks a request over its method's own limit
// (RequestLimiter), refused before it was decoded.
const ReasonRequestTooLarge = "REQUEST_TOO_LARGE"

// RequestLimiter is a Service some of whose requests are bounded far below
// the server's message limit (-max-msg-bytes, sized for the LLM's long
// contexts), such as the vault's PutSecret under its value cap.
//
// grpc-go reads a request whole, up to the server-wide limit, before any
// code of ours can see which method it is for; what a per-method limit can
// spare is everything after: the codec refuses the frame by its length,
// before decoding it, so no copy of the payload is made (no string of it,
// no interceptor's or handler's look at it), and the buffers go back to
// grpc's pool at once. The answer is RESOURCE_EXHAUSTED, as grpc's own
// limit answers, with an ErrorInfo naming the message, its size and the
// limit.
type RequestLimiter interface {
	// RequestLimits maps full method names ("/fabro.vault.v1.VaultService/PutSecret")
	// to the largest request encoding they accept, in bytes.
	RequestLimits() map[string]int
}

// requestLimits resolves the services' method limits to their request
// messages, which is what the codec sees.
func requestLimits(services []Service) (map[protoreflect.FullName]int, error) {
	out := map[protoreflect.FullName]int{}
	for _, svc := range services {
		rl, ok := svc.(RequestLimiter)
		if !ok {
			continue
		}
		for method, limit := range rl.RequestLimits() {
			in, err := inputOf(method)
			if err != nil {
				return nil, fmt.Errorf("server: %s request limit: %w", svc.Name(), err)
			}
			if old, ok := out[in]; ok && old != limit {
				return nil, fmt.Errorf("server: %s request limit: %s already limited to %d bytes", svc.Name(), in, old)
			}
			out[in] = limit
		}
	}
	return out, nil
}

// inputOf is the request message of a full method name.
func inputOf(method string) (protoreflect.FullName, error) {
	name := protoreflect.FullName(method)
	if svc, m, ok := strings.Cut(strings.TrimPrefix(method, "/"), "/"); ok {
		name = protoreflect.FullName(svc + "." + m)
	}
	d, err := protoregistry.GlobalFiles.FindDescriptorByName(name)
	if err != nil {
		return "", fmt.Errorf("no method %s: %w", method, err)
	}
	md, ok := d.(protoreflect.MethodDescriptor)
	if !ok {
		return "", fmt.Errorf("%s is not a method", method)
	}
	return md.Input().FullName(), nil
}

// tooLargeMark starts the unknown-field bytes of a request the codec
// refused for its size: the size and the limit follow. Like
// malformedMark, field number 0 cannot start a decoded message's unknown
// bytes.
var tooLargeMark = []byte{0x00, 0x00, 'f', 'a', 'b', 'r', 'o', ':', 't', 'o', 'o', '-', 'l', 'a', 'r', 'g', 'e', ':'}

// markTooLarge leaves m empty and marked as size bytes over limit.
func markTooLarge(m proto.Message, size, limit int) {
	proto.Reset(m)
	mark := bytes.Clone(tooLargeMark)
	mark = strconv.AppendInt(mark, int64(size), 10)
	mark = append(mark, ' ')
	mark = strconv.AppendInt(mark, int64(limit), 10)
	m.ProtoReflect().SetUnknown(mark)
}

// tooLarge returns the RESOURCE_EXHAUSTED of a request markTooLarge
// marked, or nil.
func tooLarge(m proto.Message) error {
	u := m.ProtoReflect().GetUnknown()
	if !bytes.HasPrefix(u, tooLargeMark) {
		return nil
	}
	size, limit, _ := strings.Cut(string(u[len(tooLargeMark):]), " ")
	name := string(m.ProtoReflect().Descriptor().FullName())
	return Domain.New(codes.ResourceExhausted, ReasonRequestTooLarge,
		fmt.Sprintf("a %s of %s bytes is larger than the %s bytes it may be; refused undecoded", name, size, limit),
		grpcerr.Meta("message", name, "size", size, "limit", limit))
}

// restLimits are the services' request limits for their REST routes, by
// operationId ("VaultService_PutSecret", as protoc-gen-openapiv2 names
// the route of /fabro.vault.v1.VaultService/PutSecret): room for the
// JSON of a request at its limit, whose string bytes can take six
// characters each (\u0000), so the body is refused unread before
// grpc-gateway decodes it.
func restLimits(services []Service) map[string]int64 {
	out := map[string]int64{}
	for _, svc := range services {
		rl, ok := svc.(RequestLimiter)
		if !ok {
			continue
		}
		for method, limit := range rl.RequestLimits() {
			full, m, ok := strings.Cut(strings.TrimPrefix(method, "/"), "/")
			if !ok {
				continue
			}
			op := full[strings.LastIndexByte(full, '.')+1:] + "_" + m
			out[op] = 6*int64(limit) + 1<<10
		}
	}
	return out
}
