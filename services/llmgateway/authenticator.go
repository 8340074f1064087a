package llmgateway

import (
	"context"
	"log/slog"

	llmv1 "github.com/fabro-sh/fabro-go/gen/fabro/llm/v1"
	"github.com/fabro-sh/fabro-go/platform/auth"
)

// TokenAuthenticator checks a compatible endpoint's API key as a fabro
// token against v, under the same grant as the gateway's own Stream RPC:
// whoever may stream from the gateway over gRPC may use the SDK fronts.
func TokenAuthenticator(v auth.Verifier, logger *slog.Logger) Authenticator {
	return tokenAuthenticator{ic: &auth.Interceptor{Verifier: v, Logger: logger}}
}

type tokenAuthenticator struct{ ic *auth.Interceptor }

// Authenticate returns ctx carrying the token's principal, which the
// compatible endpoints bind their envelopes to.
func (a tokenAuthenticator) Authenticate(ctx context.Context, token string) (context.Context, error) {
	actx, err := a.ic.AuthorizeToken(ctx, llmv1.LLMGatewayService_Stream_FullMethodName, token)
	if err != nil {
		return nil, err
	}
	// The principal only: the rest of actx is the incoming metadata made up
	// for the check.
	p, _ := auth.FromContext(actx)
	return auth.WithPrincipal(ctx, p), nil
}

// WatchToken ends a compatible endpoint's call, its stream included, once
// its token is revoked, as the gRPC streams end (auth.Interceptor.Watch).
func (a tokenAuthenticator) WatchToken(ctx context.Context, token string) (context.Context, context.CancelFunc) {
	return a.ic.WatchToken(ctx, token)
}
