package auth_test

import (
	"bytes"
	"context"
	"errors"
	"log/slog"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
	"google.golang.org/genproto/googleapis/rpc/errdetails"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	_ "google.golang.org/grpc/health/grpc_health_v1"
	"google.golang.org/grpc/metadata"
	_ "google.golang.org/grpc/reflection/grpc_reflection_v1"
	_ "google.golang.org/grpc/reflection/grpc_reflection_v1alpha"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/reflect/protoreflect"
	"google.golang.org/protobuf/reflect/protoregistry"

	_ "github.com/fabro-sh/fabro-go/gen/fabro/agent/v1"
	_ "github.com/fabro-sh/fabro-go/gen/fabro/auth/v1"
	_ "github.com/fabro-sh/fabro-go/gen/fabro/llm/v1"
	_ "github.com/fabro-sh/fabro-go/gen/fabro/sandbox/v1"
	_ "github.com/fabro-sh/fabro-go/gen/fabro/vault/v1"
	"github.com/fabro-sh/fabro-go/platform/auth"
)

// TestTableCoversEveryMethod walks every service descriptor fabro serves
// (every gen/ package, health and reflection) and fails on a method without
// an entry, so that a new RPC cannot be forgotten (it would be denied to
// everyone), and on an entry naming no method.
func TestTableCoversEveryMethod(t *testing.T) {
	seen := map[string]bool{}
	services := 0
	protoregistry.GlobalFiles.RangeFiles(func(fd protoreflect.FileDescriptor) bool {
		pkg := string(fd.Package())
		if !strings.HasPrefix(pkg, "fabro.") && pkg != "grpc.health.v1" && !strings.HasPrefix(pkg, "grpc.reflection.") {
			return true
		}
		for i := range fd.Services().Len() {
			sd := fd.Services().Get(i)
			services++
			for j := range sd.Methods().Len() {
				m := "/" + string(sd.FullName()) + "/" + string(sd.Methods().Get(j).Name())
				seen[m] = true
				if _, ok := auth.Table[m]; !ok {
					t.Errorf("%s has no entry in auth.Table", m)
				}
			}
		}
		return true
	})
	if services < 8 {
		t.Fatalf("walked %d services; the gen packages are not all linked in", services)
	}
	for m := range auth.Table {
		if !seen[m] {
			t.Errorf("auth.Table entry %s names no method", m)
		}
	}
}

func TestStore(t *testing.T) {
	path := filepath.Join(t.TempDir(), "auth", "tokens.json")
	writer, reader := auth.OpenStore(path), auth.OpenStore(path) // two processes, one file
	if _, err := reader.Verify("fabro_0123456789abcdef_" + strings.Repeat("A", 43)); !errors.Is(err, auth.ErrInvalidToken) {
		t.Fatalf("no store file yet: %v", err)
	}
	alice, e, err := writer.Issue("alice", auth.RoleUser)
	if err != nil {
		t.Fatal(err)
	}
	if !strings.HasPrefix(alice, "fabro_"+e.ID+"_") || len(alice) < 6+16+1+43 {
		t.Errorf("token %q does not carry its id %q", alice, e.ID)
	}
	p, err := reader.Verify(alice)
	if err != nil {
		t.Fatal(err)
	}
	if diff := cmp.Diff(auth.Principal{Name: "alice", Role: auth.RoleUser, TokenID: e.ID}, p); diff != "" {
		t.Errorf("principal (-want +got):\n%s", diff)
	}

	// The file holds hashes only, mode 0600.
	b, _ := os.ReadFile(path)
	if strings.Contains(string(b), alice[len(alice)-43:]) {
		t.Errorf("the store holds the token's secret:\n%s", b)
	}
	if fi, _ := os.Stat(path); fi.Mode().Perm() != 0o600 {
		t.Errorf("store mode %v, want 0600", fi.Mode().Perm())
	}

	// A service token replaces the service's previous one.
	old, _ := writer.IssueService("agent")
	fresh, _ := writer.IssueService("agent")
	if _, err := reader.Verify(old); !errors.Is(err, auth.ErrInvalidToken) {
		t.Errorf("the replaced service token still verifies: %v", err)
	}
	if p, err := reader.Verify(fresh); err != nil || !p.IsService("agent") {
		t.Errorf("service token: %v %v", p, err)
	}

	// Revocation by another Store on the same file takes effect on the next call.
	if err := writer.Revoke(e.ID); err != nil {
		t.Fatal(err)
	}
	if _, err := reader.Verify(alice); !errors.Is(err, auth.ErrInvalidToken) {
		t.Errorf("revoked token verifies: %v", err)
	}
	if err := writer.Revoke(e.ID); !errors.Is(err, auth.ErrNotFound) {
		t.Errorf("revoke twice: %v", err)
	}
	list, _ := reader.List()
	if len(list) != 1 || list[0].Name != "agent" {
		t.Errorf("list = %+v", list)
	}

	// Tampered tokens: same id, other secret; wrong shape.
	for _, bad := range []string{fresh[:len(fresh)-1] + "x", fresh + "x", strings.ToUpper(fresh), "", "Bearer " + fresh} {
		if _, err := reader.Verify(bad); !errors.Is(err, auth.ErrInvalidToken) {
			t.Errorf("Verify(%q) = %v, want ErrInvalidToken", bad, err)
		}
	}

	// A damaged store refuses every token, with an error that says why.
	os.WriteFile(path, []byte("{not json"), 0o600)
	if _, err := reader.Verify(fresh); err == nil || errors.Is(err, auth.ErrInvalidToken) {
		t.Errorf("damaged store: %v, want a store error", err)
	}
}

func TestEnsureTokens(t *testing.T) {
	dir := t.TempDir()
	s := auth.OpenStore(filepath.Join(dir, "tokens.json"))
	admin := filepath.Join(dir, "admin.token")
	if created, err := s.EnsureAdminToken(admin); err != nil || !created {
		t.Fatalf("first start: %v %v", created, err)
	}
	tok, _ := auth.ReadTokenFile(admin)
	if p, err := s.Verify(tok); err != nil || p.Role != auth.RoleAdmin {
		t.Fatalf("admin token: %v %v", p, err)
	}
	if fi, _ := os.Stat(admin); fi.Mode().Perm() != 0o600 {
		t.Errorf("admin token mode %v", fi.Mode().Perm())
	}
	if created, _ := s.EnsureAdminToken(admin); created {
		t.Error("second start created another admin token")
	}
	svc := filepath.Join(dir, "agent", "token")
	s.EnsureServiceToken(svc, "agent")
	first, _ := auth.ReadTokenFile(svc)
	s.EnsureServiceToken(svc, "agent")
	if again, _ := auth.ReadTokenFile(svc); again != first {
		t.Error("a valid service token was replaced")
	}
	s.IssueService("agent") // invalidates the file's token
	s.EnsureServiceToken(svc, "agent")
	if p, err := s.Verify(mustRead(t, svc)); err != nil || !p.IsService("agent") {
		t.Errorf("re-issued service token: %v %v", p, err)
	}
}

func mustRead(t *testing.T, path string) string {
	t.Helper()
	v, err := auth.ReadTokenFile(path)
	if err != nil {
		t.Fatal(err)
	}
	return v
}

func TestInterceptor(t *testing.T) {
	store := auth.OpenStore(filepath.Join(t.TempDir(), "tokens.json"))
	admin, _, _ := store.Issue("root", auth.RoleAdmin)
	user, _, _ := store.Issue("alice", auth.RoleUser)
	agent, _ := store.IssueService("agent")
	gateway, _ := store.IssueService("llmgateway")
	revoked, re, _ := store.Issue("bob", auth.RoleUser)
	store.Revoke(re.ID)
	ic := &auth.Interceptor{Verifier: store, Logger: slog.New(slog.DiscardHandler)}

	const (
		put     = "/fabro.vault.v1.VaultService/PutSecret"
		resolve = "/fabro.vault.v1.VaultService/ResolveCredentials"
		stream  = "/fabro.llm.v1.LLMGatewayService/Stream"
		prompt  = "/fabro.agent.v1.AgentService/Prompt"
		health  = "/grpc.health.v1.Health/Check"
		refl    = "/grpc.reflection.v1.ServerReflection/ServerReflectionInfo"
	)
	tests := []struct {
		name   string
		method string
		auth   []string // authorization values
		want   codes.Code
	}{
		{"no credential", put, nil, codes.Unauthenticated},
		{"malformed header", put, []string{"Basic " + admin}, codes.Unauthenticated},
		{"not a token", put, []string{"Bearer hello"}, codes.Unauthenticated},
		{"unknown token", put, []string{"Bearer fabro_0123456789abcdef_" + strings.Repeat("A", 43)}, codes.Unauthenticated},
		{"revoked token", put, []string{"Bearer " + revoked}, codes.Unauthenticated},
		{"two credentials", put, []string{"Bearer " + admin, "Bearer " + user}, codes.Unauthenticated},
		{"admin", put, []string{"Bearer " + admin}, codes.OK},
		{"scheme in any case", put, []string{"bearer " + admin}, codes.OK},
		{"user on an admin call", put, []string{"Bearer " + user}, codes.PermissionDenied},
		{"user streams", stream, []string{"Bearer " + user}, codes.OK},
		{"agent streams", stream, []string{"Bearer " + agent}, codes.OK},
		{"gateway may not stream", stream, []string{"Bearer " + gateway}, codes.PermissionDenied},
		{"agent may not prompt agents", prompt, []string{"Bearer " + agent}, codes.PermissionDenied},
		{"user may not resolve", resolve, []string{"Bearer " + user}, codes.PermissionDenied},
		{"admin may not resolve", resolve, []string{"Bearer " + admin}, codes.PermissionDenied},
		{"gateway resolves", resolve, []string{"Bearer " + gateway}, codes.OK},
		{"health is open", health, nil, codes.OK},
		// Without one, it is let in to describe health alone (the
		// reflection server reads HealthOnlyReflection; server tests).
		{"reflection without a credential", refl, nil, codes.OK},
		{"reflection with a bad one", refl, []string{"Bearer fabro_0000000000000000_bad"}, codes.Unauthenticated},
		{"reflection with one", refl, []string{"Bearer " + user}, codes.OK},
		{"a method not in the table", "/fabro.vault.v1.VaultService/Export", []string{"Bearer " + admin}, codes.PermissionDenied},
	}
	var unauthenticated []string
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			md := metadata.MD{}
			for _, v := range tt.auth {
				md.Append("authorization", v)
			}
			ctx, err := ic.Authorize(metadata.NewIncomingContext(t.Context(), md), tt.method)
			if got := status.Code(err); got != tt.want {
				t.Fatalf("code = %v (%v), want %v", got, err, tt.want)
			}
			if err != nil {
				var info *errdetails.ErrorInfo
				for _, d := range status.Convert(err).Details() {
					info, _ = d.(*errdetails.ErrorInfo)
				}
				if info.GetDomain() != auth.ErrorDomain {
					t.Errorf("ErrorInfo = %v", info)
				}
				if tt.want == codes.Unauthenticated {
					unauthenticated = append(unauthenticated, status.Convert(err).Message())
				}
				return
			}
			if p, ok := auth.FromContext(ctx); len(tt.auth) > 0 && !ok {
				t.Errorf("no principal in the context: %v", p)
			}
			if got, want := auth.HealthOnlyReflection(ctx), tt.method == refl && len(tt.auth) == 0; got != want {
				t.Errorf("HealthOnlyReflection = %v, want %v", got, want)
			}
		})
	}
	// The same answer whatever the reason.
	for _, m := range unauthenticated {
		if m != unauthenticated[0] {
			t.Errorf("UNAUTHENTICATED messages differ: %q vs %q", m, unauthenticated[0])
		}
	}

	open := &auth.Interceptor{Verifier: store, Logger: slog.New(slog.DiscardHandler), AnonymousReflection: true}
	if _, err := open.Authorize(context.Background(), refl); err != nil {
		t.Errorf("anonymous reflection turned on: %v", err)
	}

}

// TestUnusableStore: a token store that cannot be parsed is the server's
// fault: UNAVAILABLE with RetryInfo (not UNAUTHENTICATED, which would tell
// the caller to change its credential), logged once, not on every call.
func TestUnusableStore(t *testing.T) {
	path := filepath.Join(t.TempDir(), "tokens.json")
	store := auth.OpenStore(path)
	admin, _, _ := store.Issue("root", auth.RoleAdmin)
	if err := os.WriteFile(path, []byte("{not json"), 0o600); err != nil {
		t.Fatal(err)
	}
	var logs bytes.Buffer
	ic := &auth.Interceptor{Verifier: store, Logger: slog.New(slog.NewTextHandler(&logs, nil))}
	md := metadata.Pairs("authorization", "Bearer "+admin)
	for range 50 {
		_, err := ic.Authorize(metadata.NewIncomingContext(t.Context(), md), "/fabro.vault.v1.VaultService/PutSecret")
		if status.Code(err) != codes.Unavailable {
			t.Fatalf("code = %v (%v), want UNAVAILABLE", status.Code(err), err)
		}
		var retry bool
		for _, d := range status.Convert(err).Details() {
			if _, ok := d.(*errdetails.RetryInfo); ok {
				retry = true
			}
		}
		if !retry {
			t.Fatal("no RetryInfo")
		}
	}
	if n := strings.Count(logs.String(), "token store unusable"); n != 1 {
		t.Fatalf("logged %d times, want once:\n%s", n, logs.String())
	}
	// A token that is not even well-formed is still the caller's fault.
	_, err := ic.Authorize(metadata.NewIncomingContext(t.Context(), metadata.Pairs("authorization", "Bearer hello")), "/fabro.vault.v1.VaultService/PutSecret")
	if status.Code(err) != codes.Unauthenticated {
		t.Fatalf("malformed token: %v", err)
	}
}

// growingStream is a server stream whose context gains a value once a
// message is received, as the log-context interceptor's does.
type growingStream struct {
	grpc.ServerStream
	ctx context.Context
}

type tagKey struct{}

func (s *growingStream) Context() context.Context { return s.ctx }
func (s *growingStream) RecvMsg(any) error {
	s.ctx = context.WithValue(s.ctx, tagKey{}, "sess-1")
	return nil
}

// TestStreamContextFollowsInner: a streaming handler sees the principal
// and what the inner stream's context gained after authentication.
func TestStreamContextFollowsInner(t *testing.T) {
	store := auth.OpenStore(filepath.Join(t.TempDir(), "tokens.json"))
	user, _, _ := store.Issue("alice", auth.RoleUser)
	ic := &auth.Interceptor{Verifier: store, Logger: slog.New(slog.DiscardHandler)}
	inner := &growingStream{ctx: metadata.NewIncomingContext(t.Context(), metadata.Pairs("authorization", "Bearer "+user))}
	err := ic.Stream(nil, inner, &grpc.StreamServerInfo{FullMethod: "/fabro.llm.v1.LLMGatewayService/Stream"}, func(_ any, ss grpc.ServerStream) error {
		ss.RecvMsg(nil)
		ctx := ss.Context()
		if p, ok := auth.FromContext(ctx); !ok || p.Name != "alice" {
			t.Errorf("principal = %v %v", p, ok)
		}
		if ctx.Value(tagKey{}) != "sess-1" {
			t.Error("the value the inner stream's context gained is lost")
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
}
