// Command vault runs the vault service on its own: provider credentials
// encrypted at rest, served over gRPC and REST, and the token service that
// manages people's tokens in the shared token store.
package main

import (
	"context"
	"flag"
	"fmt"
	"log/slog"
	"path/filepath"

	"github.com/fabro-sh/fabro-go/platform/auth"
	"github.com/fabro-sh/fabro-go/platform/server"
	"github.com/fabro-sh/fabro-go/services/vault"
)

func main() {
	var (
		cfg      vault.Config
		issueDir string
	)
	server.Main("vault", server.Config{GRPCAddr: "127.0.0.1:7704", HTTPAddr: "127.0.0.1:7784"},
		func(fs *flag.FlagSet) {
			cfg.RegisterFlags(fs)
			fs.StringVar(&cfg.DataDir, "data-dir", "", "directory for the store, its audit log and generated keys (required)")
			fs.StringVar(&issueDir, "auth-issue-dir", "", "directory to issue tokens into: <dir>/admin/token on first start, and <dir>/<service>/token for llmgateway, agent and sandbox whenever absent or no longer valid; empty issues none")
		},
		func(ctx context.Context, logger *slog.Logger, srv server.Config) ([]server.Service, func(), error) {
			store := auth.OpenStore(srv.TokensFile)
			if issueDir != "" {
				if err := issue(store, issueDir, logger); err != nil {
					return nil, nil, err
				}
			}
			svc, err := vault.New(ctx, cfg, logger)
			if err != nil {
				return nil, nil, err
			}
			return []server.Service{svc, auth.NewTokenService(store)}, func() { svc.Close() }, nil
		})
}

// issue writes the first admin token and each service's token, one
// directory per principal, so a deployment can hand each container its own.
func issue(store *auth.Store, dir string, logger *slog.Logger) error {
	admin := filepath.Join(dir, "admin", "token")
	created, err := store.EnsureAdminToken(admin)
	if err != nil {
		return fmt.Errorf("vault: issue admin token: %w", err)
	}
	if created {
		logger.Info("vault issued the first admin token", "path", admin)
	}
	for _, name := range auth.ServiceNames {
		if err := store.EnsureServiceToken(filepath.Join(dir, name, "token"), name); err != nil {
			return fmt.Errorf("vault: issue %s token: %w", name, err)
		}
	}
	return nil
}
