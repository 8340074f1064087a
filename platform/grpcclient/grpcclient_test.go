package grpcclient_test

import (
	"context"
	"net"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/status"

	"github.com/fabro-sh/fabro-go/platform/grpcclient"
)

// echoHealth answers Check with the authorization it was sent, as the
// service name of an error.
type echoHealth struct {
	healthpb.UnimplementedHealthServer
}

func (echoHealth) Check(ctx context.Context, _ *healthpb.HealthCheckRequest) (*healthpb.HealthCheckResponse, error) {
	md, _ := metadata.FromIncomingContext(ctx)
	return nil, status.Error(codes.NotFound, strings.Join(md.Get("authorization"), ","))
}

func TestTokenPerCall(t *testing.T) {
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	gs := grpc.NewServer()
	healthpb.RegisterHealthServer(gs, echoHealth{})
	go gs.Serve(lis)
	t.Cleanup(gs.Stop)

	file := filepath.Join(t.TempDir(), "token")
	conn, err := grpcclient.New(lis.Addr().String(), grpcclient.Options{Token: grpcclient.TokenFileOrEnv(file, nil)})
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	client := healthpb.NewHealthClient(conn)
	// The file does not exist yet: the call fails before leaving the process.
	_, err = client.Check(t.Context(), &healthpb.HealthCheckRequest{})
	if status.Code(err) != codes.Unauthenticated || !strings.Contains(err.Error(), grpcclient.ErrNoToken.Error()) {
		t.Fatalf("no token yet: %v", err)
	}
	os.WriteFile(file, []byte("fabro_tok\n"), 0o600)
	_, err = client.Check(t.Context(), &healthpb.HealthCheckRequest{})
	if got := status.Convert(err).Message(); got != "Bearer fabro_tok" {
		t.Errorf("server saw %q", got)
	}
	// A re-issued token replaces the file (write and rename, as the vault
	// does): the next call presents it, with no restart.
	tmp := file + ".new"
	os.WriteFile(tmp, []byte("fabro_rotated\n"), 0o600)
	if err := os.Rename(tmp, file); err != nil {
		t.Fatal(err)
	}
	_, err = client.Check(t.Context(), &healthpb.HealthCheckRequest{})
	if got := status.Convert(err).Message(); got != "Bearer fabro_rotated" {
		t.Errorf("after rotation the server saw %q", got)
	}

	env := func(k string) (string, bool) { return "from-env", k == grpcclient.EnvToken }
	if tok, _ := grpcclient.TokenFileOrEnv("", env)(); tok != "from-env" {
		t.Errorf("FABRO_TOKEN: %q", tok)
	}
	if grpcclient.TokenFileOrEnv("", func(string) (string, bool) { return "", false }) != nil {
		t.Error("no file and no variable: want no token source")
	}
}

// TestTLSSettingsWithoutCA: TLS settings that cannot turn TLS on are an
// error, never a plaintext connection carrying the token.
func TestTLSSettingsWithoutCA(t *testing.T) {
	for _, o := range []grpcclient.Options{{TLSServerName: "fabro"}, {TLSCertFile: "c.pem", TLSKeyFile: "k.pem"}} {
		if conn, err := grpcclient.New("127.0.0.1:1", o); err == nil {
			conn.Close()
			t.Errorf("New(%+v) dialled; want an error naming -tls-ca-file", o)
		} else if !strings.Contains(err.Error(), "tls-ca-file") {
			t.Errorf("New(%+v) = %v; want it to name -tls-ca-file", o, err)
		}
	}
}
