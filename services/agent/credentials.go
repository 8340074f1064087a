package agent

import (
	"context"
	"fmt"

	"google.golang.org/grpc/status"

	"github.com/fabro-sh/fabro-go/platform/vaultclient"
)

// ServiceName is the agent's principal name (platform/auth).
const ServiceName = "agent"

// credentialFunc returns how tools resolve a secret: from the vault when one
// is configured (it falls back to its own environment), else from the
// agent's environment. Errors name the secret and what to do, never a value.
func credentialFunc(vc *vaultclient.Client, lookupEnv func(string) (string, bool)) func(ctx context.Context, name string) (string, error) {
	if vc == nil {
		return func(_ context.Context, name string) (string, error) {
			if v, ok := lookupEnv(name); ok && v != "" {
				return v, nil
			}
			return "", fmt.Errorf("%s is not set: set it in the agent's environment, or run the agent with a vault (fabro secret set %s)", name, name)
		}
	}
	return func(ctx context.Context, name string) (string, error) {
		values, _, err := vc.Resolve(ctx, []string{name})
		if err != nil {
			return "", fmt.Errorf("resolve %s from the vault: %s", name, status.Convert(err).Message())
		}
		if v := values[name]; v != "" {
			return v, nil
		}
		return "", fmt.Errorf("%s is not set: store it with `fabro secret set %s`", name, name)
	}
}
