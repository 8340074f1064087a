package server

import (
	"context"
	"strings"
	"testing"

	"github.com/grpc-ecosystem/grpc-gateway/v2/runtime"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/mem"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/proto"

	vaultv1 "github.com/fabro-sh/fabro-go/gen/fabro/vault/v1"
	"github.com/fabro-sh/fabro-go/platform/grpcerr"
)

type limitedService map[string]int

func (limitedService) Name() string                       { return "test" }
func (limitedService) RegisterGRPC(grpc.ServiceRegistrar) {}
func (limitedService) RegisterGateway(context.Context, *runtime.ServeMux, *grpc.ClientConn) error {
	return nil
}
func (l limitedService) RequestLimits() map[string]int { return l }

// TestRequestLimits: a method's limit applies to its request message; a
// name that is not a method, or two limits for one message, fail the
// start; the codec refuses a larger frame undecoded and passes one at the
// limit.
func TestRequestLimits(t *testing.T) {
	for name, limits := range map[string]limitedService{
		"unknown method": {"/fabro.vault.v1.VaultService/Nope": 1},
		"not a method":   {"fabro.vault.v1.PutSecretRequest": 1},
		"two limits":     {vaultv1.VaultService_PutSecret_FullMethodName: 1},
	} {
		svcs := []Service{limits}
		if name == "two limits" {
			svcs = append(svcs, limitedService{vaultv1.VaultService_PutSecret_FullMethodName: 2})
		}
		if _, err := requestLimits(svcs); err == nil {
			t.Errorf("%s: accepted", name)
		}
	}
	got, err := requestLimits([]Service{limitedService{vaultv1.VaultService_PutSecret_FullMethodName: 100}})
	if err != nil || got["fabro.vault.v1.PutSecretRequest"] != 100 {
		t.Fatalf("limits %v, %v", got, err)
	}

	codec := newLenientCodec(got)
	for _, tc := range []struct {
		value string
		code  codes.Code
	}{
		{strings.Repeat("v", 90), codes.OK},
		{strings.Repeat("v", 200), codes.ResourceExhausted},
	} {
		b, _ := proto.Marshal(&vaultv1.PutSecretRequest{Name: "K", Value: tc.value})
		var m vaultv1.PutSecretRequest
		if err := codec.Unmarshal(mem.BufferSlice{mem.SliceBuffer(b)}, &m); err != nil {
			t.Fatal(err)
		}
		err := checkMessage(&m)
		if status.Code(err) != tc.code {
			t.Errorf("%d bytes: %v, want %v", len(b), err, tc.code)
		}
		if tc.code == codes.OK && m.GetValue() != tc.value {
			t.Errorf("%d bytes: not decoded", len(b))
		}
		if tc.code != codes.OK && (m.GetValue() != "" || grpcerr.ReasonOf(err) != ReasonRequestTooLarge) {
			t.Errorf("%d bytes: decoded %d bytes, reason %q", len(b), len(m.GetValue()), grpcerr.ReasonOf(err))
		}
	}
	// Other messages are not limited.
	b, _ := proto.Marshal(&vaultv1.GetSecretRequest{Name: strings.Repeat("N", 200)})
	var g vaultv1.GetSecretRequest
	if err := codec.Unmarshal(mem.BufferSlice{mem.SliceBuffer(b)}, &g); err != nil || checkMessage(&g) != nil {
		t.Errorf("an unlimited message: %v %v", err, checkMessage(&g))
	}
}
