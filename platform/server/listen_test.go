package server

import (
	"context"
	"fmt"
	"log/slog"
	"net"
	"os"
	"runtime"
	"strings"
	"testing"
)

// TestPortInUse: a server started on a port another process holds says
// which port, what for, who holds it (on Linux) and the flag to change.
func TestPortInUse(t *testing.T) {
	held, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer held.Close()
	addr := held.Addr().String()
	tests := []struct {
		name string
		cfg  Config
		want string
	}{
		{"grpc", Config{GRPCAddr: addr}, "the gRPC address " + addr + " is in use"},
		{"rest", Config{GRPCAddr: "127.0.0.1:0", HTTPAddr: addr}, "the REST address " + addr + " is in use"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			tt.cfg.NoAuth = true
			srv, err := Start(context.Background(), tt.cfg, slog.New(slog.DiscardHandler), newFakeVault(t))
			if err == nil {
				_ = srv.Shutdown(context.Background())
				t.Fatal("New on a port in use succeeded")
			}
			msg := err.Error()
			flag := map[string]string{"grpc": "--grpc-addr", "rest": "--http-addr"}[tt.name]
			if !strings.Contains(msg, tt.want) || !strings.Contains(msg, flag) {
				t.Errorf("error %q; want it to contain %q and %s", msg, tt.want, flag)
			}
			if runtime.GOOS == "linux" {
				if by := fmt.Sprintf("(pid %d)", os.Getpid()); !strings.Contains(msg, by) {
					t.Errorf("error %q does not name the holder %s", msg, by)
				}
			}
		})
	}
}
