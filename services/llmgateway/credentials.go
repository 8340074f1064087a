package llmgateway

import (
	"context"
	"encoding/json"
	"fmt"
	"os"
	"strings"
	"sync"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/status"

	llmv1 "github.com/fabro-sh/fabro-go/gen/fabro/llm/v1"
	vaultv1 "github.com/fabro-sh/fabro-go/gen/fabro/vault/v1"
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

// resolveCaller is the vault client method the gateway uses.
type resolveCaller interface {
	ResolveCredentials(ctx context.Context, in *vaultv1.ResolveCredentialsRequest, opts ...grpc.CallOption) (*vaultv1.ResolveCredentialsResponse, error)
}

// VaultCredentials resolves credentials from the vault service, presenting
// the gateway's service token.
type VaultCredentials struct {
	client resolveCaller
	token  func() (string, error)
}

// NewVaultCredentials returns credentials resolved by client with the token
// returned by token (called per resolution until it succeeds, so a tokens
// file the vault creates after the gateway starts is still picked up).
func NewVaultCredentials(client vaultv1.VaultServiceClient, token func() (string, error)) *VaultCredentials {
	var (
		mu     sync.Mutex
		cached string
	)
	return &VaultCredentials{client: client, token: func() (string, error) {
		mu.Lock()
		defer mu.Unlock()
		if cached != "" {
			return cached, nil
		}
		t, err := token()
		if err != nil {
			return "", err
		}
		cached = t
		return t, nil
	}}
}

// Resolve implements Credentials.
func (v *VaultCredentials) Resolve(ctx context.Context, names []string) (map[string]string, []string, error) {
	tok, err := v.token()
	if err != nil {
		return nil, nil, newError(codes.FailedPrecondition, llmv1.ErrorKind_ERROR_KIND_AUTHENTICATION, "llmgateway has no vault service token: %v", err)
	}
	ctx = metadata.AppendToOutgoingContext(ctx, "authorization", "Bearer "+tok)
	resp, err := v.client.ResolveCredentials(ctx, &vaultv1.ResolveCredentialsRequest{Names: names})
	if err != nil {
		st := status.Convert(err)
		switch st.Code() {
		case codes.Canceled, codes.DeadlineExceeded:
			return nil, nil, err
		case codes.PermissionDenied, codes.Unauthenticated:
			return nil, nil, newError(codes.PermissionDenied, llmv1.ErrorKind_ERROR_KIND_PERMISSION,
				"the vault refused llmgateway the credentials %s", strings.Join(names, ", "))
		}
		return nil, nil, newError(codes.Unavailable, llmv1.ErrorKind_ERROR_KIND_NETWORK, "resolve credentials from the vault: %s", st.Message())
	}
	values := make(map[string]string, len(resp.GetCredentials()))
	for _, c := range resp.GetCredentials() {
		values[c.GetName()] = c.GetValue()
	}
	return values, resp.GetMissing(), nil
}

// TokenFromFile reads service's token from a vault service tokens file (a
// JSON object from service name to token).
func TokenFromFile(path, service string) func() (string, error) {
	return func() (string, error) {
		b, err := os.ReadFile(path)
		if err != nil {
			return "", fmt.Errorf("read service tokens: %w", err)
		}
		var tokens map[string]string
		if err := json.Unmarshal(b, &tokens); err != nil {
			return "", fmt.Errorf("parse service tokens %s: %w", path, err)
		}
		t := tokens[service]
		if t == "" {
			return "", fmt.Errorf("service tokens %s has no %q entry", path, service)
		}
		return t, nil
	}
}

// credentialsFor resolves the credentials a provider needs for one attempt.
// A missing credential is FAILED_PRECONDITION naming what to set.
func credentialsFor(ctx context.Context, creds Credentials, p *llmv1.Provider) (map[string]string, error) {
	auth := p.GetAuth()
	names := auth.GetCredentialNames()
	if auth.GetScheme() == llmv1.AuthScheme_AUTH_SCHEME_NONE || len(names) == 0 {
		return nil, nil
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
		for _, n := range names {
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
		"provider %s needs the credential %s: set it with `fabro secret set %s`", p.GetId(), strings.Join(need, " or "), need[0])
	e.detail.Provider = p.GetId()
	e.detail.MissingCredentials = need
	return nil, e
}
