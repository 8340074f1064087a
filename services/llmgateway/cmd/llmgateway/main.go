// Command llmgateway serves the LLM gateway: gRPC on -grpc-addr and its
// REST mapping on -http-addr. Every flag can also be set from the
// environment as FABRO_<FLAG>, e.g. FABRO_VAULT_ADDR.
package main

import (
	"context"
	"log/slog"

	"github.com/fabro-sh/fabro-go/platform/auth"
	"github.com/fabro-sh/fabro-go/platform/server"
	"github.com/fabro-sh/fabro-go/services/llmgateway"
)

func main() {
	var cfg llmgateway.Config
	server.Main("llmgateway", server.Config{GRPCAddr: "127.0.0.1:7701", HTTPAddr: "127.0.0.1:7781"},
		cfg.RegisterFlags,
		func(ctx context.Context, logger *slog.Logger, srv server.Config) ([]server.Service, func(), error) {
			gw, err := llmgateway.New(ctx, cfg, logger)
			if err != nil {
				return nil, nil, err
			}
			// The OpenAI- and Anthropic-compatible APIs take a fabro token as
			// their API key, checked against the server's own token store.
			switch {
			case srv.Auth != nil:
				gw.SetAuthenticator(llmgateway.TokenAuthenticator(srv.Auth, logger))
				if ps, ok := srv.Auth.(llmgateway.PolicySource); ok {
					gw.SetPolicies(ps)
				}
			case srv.TokensFile != "":
				store := auth.OpenStore(srv.TokensFile)
				gw.SetAuthenticator(llmgateway.TokenAuthenticator(store, logger))
				// Budgets, rate limits and model lists live beside the tokens.
				gw.SetPolicies(store)
			}
			return []server.Service{gw}, func() { gw.Close() }, nil
		})
}
