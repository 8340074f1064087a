package server

import (
	"errors"
	"io"
	"slices"
	"strings"
	"testing"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/metadata"
	reflectionv1 "google.golang.org/grpc/reflection/grpc_reflection_v1"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/descriptorpb"

	"github.com/fabro-sh/fabro-go/platform/auth"
	"github.com/fabro-sh/fabro-go/platform/auth/authtest"
)

// TestReflectionHasComments: reflection answers a service's file with its
// source information, so grpcurl describe shows each RPC's comment; a
// service outside the contracts (health) is still described.
func TestReflectionHasComments(t *testing.T) {
	h := start(t, Config{})
	stream, err := reflectionv1.NewServerReflectionClient(h.conn).ServerReflectionInfo(t.Context())
	if err != nil {
		t.Fatal(err)
	}
	for _, tt := range []struct {
		symbol  string
		comment string // a comment of that file, "" for none asked
	}{
		{"fabro.vault.v1.VaultService", "PutSecret"},
		{"grpc.health.v1.Health", ""},
	} {
		if err := stream.Send(&reflectionv1.ServerReflectionRequest{
			MessageRequest: &reflectionv1.ServerReflectionRequest_FileContainingSymbol{FileContainingSymbol: tt.symbol},
		}); err != nil {
			t.Fatal(err)
		}
		resp, err := stream.Recv()
		if err != nil {
			t.Fatal(err)
		}
		files := resp.GetFileDescriptorResponse().GetFileDescriptorProto()
		if len(files) == 0 {
			t.Fatalf("%s: no file: %v", tt.symbol, resp)
		}
		var fd descriptorpb.FileDescriptorProto
		if err := proto.Unmarshal(files[0], &fd); err != nil {
			t.Fatal(err)
		}
		if tt.comment == "" {
			continue
		}
		var comments []string
		for _, loc := range fd.GetSourceCodeInfo().GetLocation() {
			comments = append(comments, loc.GetLeadingComments())
		}
		if all := strings.Join(comments, "\n"); !strings.Contains(all, tt.comment) {
			t.Errorf("%s (%s): the file's comments do not mention %s; %d locations", tt.symbol, fd.GetName(), tt.comment, len(fd.GetSourceCodeInfo().GetLocation()))
		}
	}
}

// TestAnonymousReflectionHealthOnly: with no credential, reflection lists
// and describes the health service and nothing else (grpcurl can check
// health without a token); a bad token is refused as on every call; an
// admin's token sees every service.
func TestAnonymousReflectionHealthOnly(t *testing.T) {
	fx := authtest.New(t)
	h := start(t, Config{Auth: fx.Store})
	ask := func(t *testing.T, token string, req *reflectionv1.ServerReflectionRequest) (*reflectionv1.ServerReflectionResponse, error) {
		ctx := t.Context()
		if token != "" {
			ctx = metadata.AppendToOutgoingContext(ctx, "authorization", "Bearer "+token)
		}
		stream, err := reflectionv1.NewServerReflectionClient(h.conn).ServerReflectionInfo(ctx)
		if err != nil {
			return nil, err
		}
		// A refused stream may end before Send: its status is Recv's.
		if err := stream.Send(req); err != nil && !errors.Is(err, io.EOF) {
			return nil, err
		}
		return stream.Recv()
	}
	list := &reflectionv1.ServerReflectionRequest{MessageRequest: &reflectionv1.ServerReflectionRequest_ListServices{}}
	symbol := func(s string) *reflectionv1.ServerReflectionRequest {
		return &reflectionv1.ServerReflectionRequest{MessageRequest: &reflectionv1.ServerReflectionRequest_FileContainingSymbol{FileContainingSymbol: s}}
	}
	names := func(r *reflectionv1.ServerReflectionResponse) []string {
		var out []string
		for _, s := range r.GetListServicesResponse().GetService() {
			out = append(out, s.GetName())
		}
		return out
	}

	resp, err := ask(t, "", list)
	if err != nil {
		t.Fatal(err)
	}
	if got := names(resp); len(got) != 1 || got[0] != "grpc.health.v1.Health" {
		t.Errorf("anonymous list: %v, want the health service alone", got)
	}
	if resp, err = ask(t, "", symbol("grpc.health.v1.Health.Check")); err != nil || len(resp.GetFileDescriptorResponse().GetFileDescriptorProto()) == 0 {
		t.Errorf("anonymous describe of health: %v %v", resp, err)
	}
	for _, s := range []string{vaultName, "fabro.vault.v1.PutSecretRequest", "grpc.reflection.v1.ServerReflection"} {
		resp, err := ask(t, "", symbol(s))
		if err != nil || resp.GetErrorResponse().GetErrorCode() != int32(codes.NotFound) {
			t.Errorf("anonymous describe of %s: %v %v; want NOT_FOUND", s, resp, err)
		}
	}
	if _, err := ask(t, "fabro_0000000000000000_bad", list); status.Code(err) != codes.Unauthenticated {
		t.Errorf("a bad token: %v, want UNAUTHENTICATED", err)
	}
	resp, err = ask(t, fx.Token("root", auth.RoleAdmin), list)
	if err != nil || !slices.Contains(names(resp), vaultName) {
		t.Errorf("admin list: %v %v", names(resp), err)
	}
}
