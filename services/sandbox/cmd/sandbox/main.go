// Command sandbox runs the sandbox service alone, gRPC and REST.
package main

import (
	"context"
	"flag"
	"fmt"
	"log/slog"
	"os"

	vaultv1 "github.com/fabro-sh/fabro-go/gen/fabro/vault/v1"
	"github.com/fabro-sh/fabro-go/platform/grpcclient"
	"github.com/fabro-sh/fabro-go/platform/server"
	"github.com/fabro-sh/fabro-go/platform/vaultclient"
	"github.com/fabro-sh/fabro-go/services/sandbox"
	"github.com/fabro-sh/fabro-go/services/sandbox/driver/docker"
)

func main() {
	var (
		cfg                  sandbox.Config
		vaultAddr, tokenFile string
		client               grpcclient.Options
	)
	server.Main("sandbox", server.Config{GRPCAddr: "127.0.0.1:7702", HTTPAddr: "127.0.0.1:7782"},
		func(fs *flag.FlagSet) {
			fs.StringVar(&cfg.DataDir, "data-dir", "", "directory for the durable registry of sandboxes and their managed workspaces (<data-dir>/sandbox); empty keeps sandboxes in memory, workspaces in the system temporary directory")
			fs.StringVar(&cfg.DefaultDriver, "sandbox-driver", "local", "the driver used when a spec names none: local or docker")
			fs.StringVar(&cfg.DockerImage, "docker-image", docker.DefaultImage, "the docker driver's default image (built by `make sandbox-base`; never pulled)")
			fs.StringVar(&cfg.PluginDir, "plugin-dir", "", "directory of driver plugins: fabro-sandbox-NAME binaries and their SHA256SUMS (docs/plugins.md)")
			fs.StringVar(&vaultAddr, "vault-addr", "", "the vault's gRPC address, for the daytona driver's DAYTONA_API_URL and DAYTONA_API_KEY; empty: no daytona driver")
			fs.StringVar(&tokenFile, "token-file", "", "file holding the sandbox service's own token, presented to the vault; default $FABRO_TOKEN")
			client.RegisterFlags(fs, "")
			cfg.Security.RegisterFlags(fs)
		},
		func(ctx context.Context, logger *slog.Logger, _ server.Config) ([]server.Service, func(), error) {
			closeConn := func() {}
			if vaultAddr != "" {
				o := client
				o.Token = grpcclient.TokenFileOrEnv(tokenFile, os.LookupEnv)
				conn, err := grpcclient.New(vaultAddr, o)
				if err != nil {
					return nil, nil, fmt.Errorf("sandbox: vault client: %w", err)
				}
				closeConn = func() { conn.Close() }
				cfg.DaytonaCredentials = vaultclient.New(vaultv1.NewVaultServiceClient(conn))
			}
			svc, err := sandbox.New(cfg, logger)
			if err != nil {
				closeConn()
				return nil, nil, err
			}
			// Sandboxes outlive requests: once the server drained, delete them
			// (in memory) or leave them for the next start (durable).
			return []server.Service{svc}, func() { svc.Close(context.WithoutCancel(ctx)); closeConn() }, nil
		})
}
