package llmgateway

import (
	"context"
	"errors"
	"os"
	"slices"
	"strings"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	llmv1 "github.com/fabro-sh/fabro-go/gen/fabro/llm/v1"
	vaultv1 "github.com/fabro-sh/fabro-go/gen/fabro/vault/v1"
	"github.com/fabro-sh/fabro-go/platform/vaultclient"
)

// Credentials resolves credential values by name. Values must never be
// logged. Resolve returns the values found and the names with no value.
type Credentials interface {
	Resolve(ctx context.Context, names []string) (values map[string]string, missing []string, err error)
}

// EnvCredentials resolves credentials from the process environment; it is
// used when no vault is configured.
type EnvCredentials struct {
	LookupEnv func(string) (string, bool) // default os.LookupEnv
}

// Resolve implements Credentials.
func (e EnvCredentials) Resolve(_ context.Context, names []string) (map[string]string, []string, error) {
	lookup := e.LookupEnv
	if lookup == nil {
		lookup = os.LookupEnv
	}
	values := make(map[string]string, len(names))
	var missing []string
	for _, n := range names {
		if v, ok := lookup(n); ok && v != "" {
			values[n] = v
		} else {
			missing = append(missing, n)
		}
	}
	return values, missing, nil
}

// VaultCredentials resolves credentials from the vault service, presenting
// the gateway's service token.
type VaultCredentials struct {
	client *vaultclient.Client
}

// NewVaultCredentials returns credentials resolved by client with the token
// returned by token (asked for per resolution until it succeeds, so a tokens
// file the vault creates after the gateway starts is still picked up).
func NewVaultCredentials(client vaultv1.VaultServiceClient, token func() (string, error)) *VaultCredentials {
	return &VaultCredentials{client: vaultclient.New(client, token)}
}

// Resolve implements Credentials.
func (v *VaultCredentials) Resolve(ctx context.Context, names []string) (map[string]string, []string, error) {
	values, missing, err := v.client.Resolve(ctx, names)
	switch {
	case err == nil:
		return values, missing, nil
	case errors.Is(err, vaultclient.ErrNoToken):
		return nil, nil, newError(codes.FailedPrecondition, llmv1.ErrorKind_ERROR_KIND_AUTHENTICATION, "llmgateway has no vault service token: %v", err).withReason("VAULT_TOKEN_MISSING")
	}
	st := status.Convert(err)
	switch st.Code() {
	case codes.Canceled, codes.DeadlineExceeded:
		return nil, nil, err
	}
	// The vault's answer passes through, its ErrorInfo (vault.fabro.dev or
	// auth.fabro.dev) and details included, beside the gateway's
	// ErrorDetail. A vault that cannot be reached is UPSTREAM_UNAVAILABLE
	// with RetryInfo. Only the code of a refusal changes: the gateway's
	// credential, not the caller's, was refused.
	up := status.Convert(domain.Upstream("vault", err))
	e := newError(up.Code(), llmv1.ErrorKind_ERROR_KIND_NETWORK, "resolve credentials from the vault: %s", st.Message())
	if c := up.Code(); c == codes.PermissionDenied || c == codes.Unauthenticated {
		e = newError(codes.PermissionDenied, llmv1.ErrorKind_ERROR_KIND_PERMISSION,
			"the vault refused llmgateway the credentials %s", strings.Join(names, ", "))
	}
	e.upstream = up
	return nil, nil, e
}

// credentialsFor resolves the credentials a provider needs for one attempt.
// A missing credential is FAILED_PRECONDITION naming what to set.
func credentialsFor(ctx context.Context, creds Credentials, p *llmv1.Provider) (map[string]string, error) {
	auth := p.GetAuth()
	names := auth.GetCredentialNames()
	if auth.GetScheme() == llmv1.AuthScheme_AUTH_SCHEME_NONE || len(names) == 0 {
		return nil, nil
	}
	if auth.GetScheme() == llmv1.AuthScheme_AUTH_SCHEME_AWS_SIGV4 {
		// Optional: the region, when the catalog's base URL leaves it open.
		names = append(slices.Clip(names), "AWS_REGION", "AWS_DEFAULT_REGION")
	}
	values, _, err := creds.Resolve(ctx, names)
	if err != nil {
		return nil, err
	}
	var need []string // what is missing, to name in the error
	switch auth.GetScheme() {
	case llmv1.AuthScheme_AUTH_SCHEME_AWS_SIGV4:
		// A Bedrock API key alone, or an access key pair.
		if values["AWS_BEARER_TOKEN_BEDROCK"] != "" || (values["AWS_ACCESS_KEY_ID"] != "" && values["AWS_SECRET_ACCESS_KEY"] != "") {
			return values, nil
		}
		for _, n := range auth.GetCredentialNames() {
			if n != "AWS_SESSION_TOKEN" && values[n] == "" {
				need = append(need, n)
			}
		}
	default:
		for _, n := range names { // the first present wins
			if values[n] != "" {
				return values, nil
			}
		}
		need = names
	}
	e := newError(codes.FailedPrecondition, llmv1.ErrorKind_ERROR_KIND_AUTHENTICATION,
		"provider %s needs the credential %s: set it with `fabro secret set %s`", p.GetProviderId(), strings.Join(need, " or "), need[0])
	e.detail.ProviderId = p.GetProviderId()
	e.detail.MissingCredentials = need
	e.reason = "CREDENTIAL_MISSING"
	return nil, e
}
