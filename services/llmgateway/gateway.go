// Package llmgateway is the LLM gateway service: one door to every model
// provider. It resolves a model selector against the catalog, speaks the
// provider's wire codec over HTTP, retries and fails over, resolves
// credentials from the vault (kept in memory for a minute), and accounts
// usage and cost.
package llmgateway

import (
	"cmp"
	"context"
	"errors"
	"flag"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"os"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/grpc-ecosystem/grpc-gateway/v2/runtime"
	"go.opentelemetry.io/otel"
	"go.opentelemetry.io/otel/trace"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/metadata"

	llmv1 "github.com/fabro-sh/fabro-go/gen/fabro/llm/v1"
	vaultv1 "github.com/fabro-sh/fabro-go/gen/fabro/vault/v1"
	"github.com/fabro-sh/fabro-go/platform/auth"
	"github.com/fabro-sh/fabro-go/platform/grpcclient"
	"github.com/fabro-sh/fabro-go/platform/jsonschema"
	"github.com/fabro-sh/fabro-go/platform/paging"
	"github.com/fabro-sh/fabro-go/platform/server"
	"github.com/fabro-sh/fabro-go/services/llmgateway/internal/catalog"
	"github.com/fabro-sh/fabro-go/services/llmgateway/internal/codec"
	"github.com/fabro-sh/fabro-go/services/llmgateway/internal/compat"
	"github.com/fabro-sh/fabro-go/services/llmgateway/internal/envelope"
	"github.com/fabro-sh/fabro-go/services/llmgateway/internal/governance"
	"github.com/nats-io/nats.go/jetstream"
)

// Defaults for zero Config fields.
const (
	DefaultMaxAttempts   = 3
	DefaultMaxRetryAfter = 30 * time.Second
	// DefaultIdleTimeout is the longest an upstream response body may go
	// without a byte. Providers stream continuously or send keep-alives
	// (Anthropic pings, Responses and Gemini chunks), but OpenAI-style
	// chat streams go quiet while a reasoning model thinks, for minutes at
	// high effort; 5 minutes keeps those alive and still ends a hung
	// connection, which TCP keep-alive cannot see, long before a caller
	// would give up.
	DefaultIdleTimeout = 5 * time.Minute
	// ServiceName is the gateway's principal name (platform/auth).
	ServiceName = "llmgateway"
)

// Config configures the gateway. The flag-bound fields come first; the rest
// are for embedding and tests.
type Config struct {
	// CatalogOverlay is an operator catalog file merged over the built-in one.
	CatalogOverlay string
	// VaultAddr is the vault's gRPC address; empty means credentials come
	// from the environment only.
	VaultAddr string
	// TokenFile holds the gateway's own token, presented to the vault (else
	// $FABRO_TOKEN).
	TokenFile string
	// VaultClient configures the vault connection: TLS with a CA file.
	VaultClient grpcclient.Options
	// EnvelopeKeyFile holds the key that seals the round-trip state the
	// compatible endpoints hand clients (created, mode 0600, if missing).
	// Replicas behind one address must share it; empty means a key in
	// memory, so state from before a restart is refused.
	EnvelopeKeyFile string

	// Credentials overrides VaultAddr: e.g. an in-process vault client.
	Credentials Credentials
	// Codecs maps a catalog codec to its implementation; nil means the
	// built-in codecs.
	Codecs map[llmv1.Codec]codec.Codec
	// HTTPClient calls providers; nil means a pooled client without an
	// overall timeout (streams can be long; cancellation ends them).
	HTTPClient *http.Client
	// TracerProvider makes the per-attempt spans; nil means the global one.
	TracerProvider trace.TracerProvider
	// Backoff computes the wait before another attempt; nil means
	// DefaultBackoff. Tests pass a zero backoff.
	Backoff func(attempt int, retryAfter time.Duration) time.Duration
	// MaxAttempts per route (default 3); MaxRetryAfter is the longest
	// Retry-After honoured on the same route (default 30 s): longer goes
	// to the next route instead.
	MaxAttempts   int
	MaxRetryAfter time.Duration
	// IdleTimeout ends an attempt whose response body sends nothing for
	// this long (default DefaultIdleTimeout) with a TIMEOUT error: retried
	// before visible output, an error event after it.
	IdleTimeout time.Duration
	// LookupEnv reads the environment (default os.LookupEnv).
	LookupEnv func(string) (string, bool)
	// DiscoveryTTL is how long a discoverable provider's live model list
	// is kept (default DefaultDiscoveryTTL); DiscoveryWait is how long
	// ListModels waits for a provider's first list (default
	// DefaultDiscoveryWait).
	DiscoveryTTL, DiscoveryWait time.Duration
	// CredentialTTL is how long credentials resolved from the vault are
	// kept in memory (default DefaultCredentialTTL; negative: never), so
	// that a vault restart fails no call; a provider's 401 drops them.
	CredentialTTL time.Duration
	// BedrockS3Buckets are the S3 buckets a caller's s3:// image source may
	// name. Bedrock reads them with the gateway's own AWS role, so by
	// default (none) every s3:// source is refused.
	BedrockS3Buckets []string
	// GovernanceNATSURL is the NATS server whose JetStream key-value store
	// keeps token spend and rate counters, shared by every replica; empty
	// keeps them in this process only (lost on restart).
	GovernanceNATSURL string
	// GovernanceJetStream overrides GovernanceNATSURL: an embedded NATS.
	GovernanceJetStream jetstream.JetStream
	// GovernanceNow is the governance clock (tests); nil means time.Now.
	GovernanceNow func() time.Time
	// PrincipalLimitsFile holds limits per principal, across all of its
	// tokens (LoadPrincipalLimits); empty: none. Read at start.
	PrincipalLimitsFile string
	// PrincipalLimits overrides PrincipalLimitsFile (tests).
	PrincipalLimits map[string]*auth.Policy
}

// RegisterFlags binds -llm-catalog-overlay, -vault-addr, -token-file,
// -llm-envelope-key-file, -credential-cache-ttl and
// the client TLS flags (-tls-ca-file, ...) to c; with platform/envflag they
// read FABRO_LLM_CATALOG_OVERLAY, FABRO_VAULT_ADDR, FABRO_TOKEN_FILE, ....
func (c *Config) RegisterFlags(fs *flag.FlagSet) {
	fs.StringVar(&c.CatalogOverlay, "llm-catalog-overlay", c.CatalogOverlay, "JSON catalog file merged over the built-in model catalog")
	fs.StringVar(&c.VaultAddr, "vault-addr", c.VaultAddr, "vault gRPC address (host:port) to resolve provider credentials from; empty: environment only")
	fs.StringVar(&c.TokenFile, "token-file", c.TokenFile, "file holding the gateway's own token, presented to the vault; default $FABRO_TOKEN")
	fs.StringVar(&c.EnvelopeKeyFile, "llm-envelope-key-file", c.EnvelopeKeyFile, "file holding the key that seals reasoning state handed to compatible-API clients, created if missing; replicas must share it; empty: a key in memory, lost on restart")
	fs.DurationVar(&c.CredentialTTL, "credential-cache-ttl", c.CredentialTTL, "how long provider credentials resolved from the vault are kept in memory (default 1m; negative: not kept)")
	fs.Func("llm-bedrock-s3-buckets", "comma-separated S3 buckets callers' s3:// image sources may name (Bedrock reads them with the gateway's AWS role); default none: s3:// sources are refused", func(v string) error {
		for b := range strings.SplitSeq(v, ",") {
			if b = strings.TrimSpace(b); b != "" {
				c.BedrockS3Buckets = append(c.BedrockS3Buckets, b)
			}
		}
		return nil
	})
	fs.StringVar(&c.PrincipalLimitsFile, "llm-principal-limits", c.PrincipalLimitsFile, "JSON file of limits per principal across all its tokens: {\"user:alice\": {\"budget\": \"100usd/month\", \"rpm\": 120, \"tpm\": 200000, \"max_concurrent\": 8, \"models\": [\"anthropic/*\"]}}; read at start")
	fs.StringVar(&c.GovernanceNATSURL, "llm-governance-nats-url", c.GovernanceNATSURL, "NATS URL whose JetStream key-value store keeps token spend and rate limits, shared by replicas; empty: kept in memory, lost on restart")
	c.VaultClient.RegisterFlags(fs, "")
}

// Service is the gateway. It implements llmv1.LLMGatewayServiceServer and
// the server runtime's Service interface.
type Service struct {
	llmv1.UnimplementedLLMGatewayServiceServer

	logger        *slog.Logger
	cat           *catalog.Catalog
	codecs        map[llmv1.Codec]codec.Codec
	creds         Credentials
	http          *http.Client
	tracer        trace.Tracer
	backoff       func(int, time.Duration) time.Duration
	maxAttempts   int
	maxRetryAfter time.Duration
	idleTimeout   time.Duration
	closers       []func() error
	auth          Authenticator
	sealer        *envelope.Sealer
	s3Buckets     []string         // BedrockS3Buckets
	disc          *discovery       // nil: no discoverable provider
	credCache     *credentialCache // nil: credentials are resolved on every attempt
	gov           *governance.Engine
	policies      PolicySource            // nil: no token has a policy
	principalLims map[string]*auth.Policy // by principal ("user:alice"); nil: none
}

// New loads the catalog and connects the credential source.
func New(ctx context.Context, cfg Config, logger *slog.Logger) (*Service, error) {
	if cfg.LookupEnv == nil {
		cfg.LookupEnv = os.LookupEnv
	}
	cat, err := catalog.Load(cfg.CatalogOverlay)
	if err != nil {
		return nil, fmt.Errorf("llmgateway: %w", err)
	}
	s := &Service{
		logger:        logger,
		cat:           cat,
		codecs:        cfg.Codecs,
		creds:         cfg.Credentials,
		http:          cfg.HTTPClient,
		backoff:       cfg.Backoff,
		maxAttempts:   cfg.MaxAttempts,
		maxRetryAfter: cfg.MaxRetryAfter,
		idleTimeout:   cfg.IdleTimeout,
		s3Buckets:     cfg.BedrockS3Buckets,
	}
	if s.codecs == nil {
		s.codecs = builtinCodecs()
	}
	if s.sealer, err = newSealer(ctx, cfg.EnvelopeKeyFile, logger); err != nil {
		return nil, err
	}
	if s.http == nil {
		s.http = newHTTPClient()
	}
	if s.backoff == nil {
		s.backoff = DefaultBackoff
	}
	if s.maxAttempts <= 0 {
		s.maxAttempts = DefaultMaxAttempts
	}
	if s.maxRetryAfter <= 0 {
		s.maxRetryAfter = DefaultMaxRetryAfter
	}
	if s.idleTimeout <= 0 {
		s.idleTimeout = DefaultIdleTimeout
	}
	tp := cfg.TracerProvider
	if tp == nil {
		tp = otel.GetTracerProvider()
	}
	s.tracer = tp.Tracer("github.com/fabro-sh/fabro-go/services/llmgateway")

	for _, p := range cat.Providers(false) {
		if p.GetDiscovery() != llmv1.Discovery_DISCOVERY_UNSPECIFIED {
			s.disc = newDiscovery(logger, s.http, func(ctx context.Context, p *llmv1.Provider) (map[string]string, error) {
				v, _, err := s.credentials(ctx, p)
				return v, err
			}, cfg.DiscoveryTTL, cfg.DiscoveryWait)
			s.closers = append(s.closers, func() error { s.disc.stop(); return nil })
			break
		}
	}

	if err := s.startGovernance(ctx, cfg); err != nil {
		s.Close()
		return nil, err
	}

	switch {
	case s.creds != nil:
	case cfg.VaultAddr != "":
		o := cfg.VaultClient
		if o.Token == nil {
			o.Token = grpcclient.TokenFileOrEnv(cfg.TokenFile, cfg.LookupEnv)
		}
		if o.Token == nil {
			logger.WarnContext(ctx, "llmgateway has no token for the vault: give -token-file or $FABRO_TOKEN, or every resolution is refused")
		}
		// A vault that restarts is waited for within the call's deadline
		// (resolving twice is harmless).
		o.Extra = append(slices.Clip(o.Extra), grpcclient.AwaitRestart(grpcclient.DefaultRestartWait, func(method string) bool {
			return method == vaultv1.VaultService_ResolveCredentials_FullMethodName
		})...)
		conn, err := grpcclient.New(cfg.VaultAddr, o)
		if err != nil {
			return nil, fmt.Errorf("llmgateway: vault client: %w", err)
		}
		s.closers = append(s.closers, conn.Close)
		s.creds = NewVaultCredentials(vaultv1.NewVaultServiceClient(conn), nil)
		logger.InfoContext(ctx, "llmgateway resolves credentials from the vault", "vault_addr", cfg.VaultAddr)
	default:
		s.creds = EnvCredentials{LookupEnv: cfg.LookupEnv}
		logger.InfoContext(ctx, "llmgateway resolves credentials from the environment (no vault address)")
	}
	if _, vault := s.creds.(*VaultCredentials); vault && cfg.CredentialTTL >= 0 {
		s.credCache = newCredentialCache(cmp.Or(cfg.CredentialTTL, DefaultCredentialTTL))
	}
	return s, nil
}

func newHTTPClient() *http.Client {
	t := http.DefaultTransport.(*http.Transport).Clone()
	// Many concurrent streams to few hosts: keep their connections.
	t.MaxIdleConns = 1024
	t.MaxIdleConnsPerHost = 256
	t.DialContext = (&net.Dialer{Timeout: 10 * time.Second, KeepAlive: 30 * time.Second}).DialContext
	t.ResponseHeaderTimeout = 10 * time.Minute // a slow first byte is normal for reasoning models
	return &http.Client{Transport: t}
}

// Close releases the vault connection.
func (s *Service) Close() error {
	var errs []error
	for _, c := range s.closers {
		errs = append(errs, c())
	}
	return errors.Join(errs...)
}

// Name implements the server runtime's Service.
func (s *Service) Name() string { return llmv1.LLMGatewayService_ServiceDesc.ServiceName }

// RegisterGRPC implements the server runtime's Service.
func (s *Service) RegisterGRPC(r grpc.ServiceRegistrar) { llmv1.RegisterLLMGatewayServiceServer(r, s) }

// RegisterGateway implements the server runtime's Service.
func (s *Service) RegisterGateway(ctx context.Context, mux *runtime.ServeMux, conn *grpc.ClientConn) error {
	return llmv1.RegisterLLMGatewayServiceHandler(ctx, mux, conn)
}

// Stream implements LLMGatewayService.Stream.
func (s *Service) Stream(req *llmv1.StreamRequest, stream grpc.ServerStreamingServer[llmv1.StreamResponse]) error {
	ctx := stream.Context()
	if req.GetRequest() == nil {
		return invalid("request", "request is required").statusErr()
	}
	var failed *llmv1.StreamError
	_, err := s.call(ctx, req.GetRequest(), func(ev *llmv1.StreamResponse) error {
		if e := ev.GetError(); e != nil {
			failed = e
		}
		return stream.Send(ev)
	})
	if failed != nil && err == nil {
		// The RPC ends OK with the failure in band: tell the access log.
		code := kindPolicies[failed.GetError().GetKind()].code
		stream.SetTrailer(metadata.Pairs(server.StreamErrorTrailer, code.String(), server.StreamErrorTrailer, failed.GetError().GetMessage()))
	}
	return toStatus(ctx, err)
}

// Complete implements LLMGatewayService.Complete.
func (s *Service) Complete(ctx context.Context, req *llmv1.CompleteRequest) (*llmv1.CompleteResponse, error) {
	if req.GetRequest() == nil {
		return nil, invalid("request", "request is required").statusErr()
	}
	resp, err := s.call(ctx, req.GetRequest(), nil)
	if err != nil {
		return nil, toStatus(ctx, err)
	}
	return &llmv1.CompleteResponse{Response: resp}, nil
}

// CompleteObject implements LLMGatewayService.CompleteObject.
func (s *Service) CompleteObject(ctx context.Context, req *llmv1.CompleteObjectRequest) (*llmv1.CompleteObjectResponse, error) {
	if req.GetRequest() == nil {
		return nil, invalid("request", "request is required").statusErr()
	}
	if !schemaNameRE.MatchString(req.GetSchemaName()) {
		return nil, invalid("schema_name", "schema_name %q must be 1-64 letters, digits, '_' or '-'", req.GetSchemaName()).statusErr()
	}
	sch, err := compileSchema(req.GetSchema())
	if err != nil {
		return nil, invalid("schema", "malformed schema: %v", err).statusErr()
	}
	r := cloneRequest(req.GetRequest())
	r.ResponseFormat = &llmv1.ResponseFormat{Type: llmv1.ResponseFormatType_RESPONSE_FORMAT_TYPE_JSON_SCHEMA, Name: req.GetSchemaName(), Schema: req.GetSchema()}
	resp, err := s.call(ctx, r, nil)
	if err != nil {
		return nil, toStatus(ctx, err)
	}
	text := jsonText(resp)
	fail := func(format string, args ...any) error {
		e := newError(codes.Unavailable, llmv1.ErrorKind_ERROR_KIND_RESPONSE_DECODE, format, args...)
		e.detail.ProviderId, e.detail.ModelId, e.detail.Attempts = resp.GetProviderId(), resp.GetModelId(), resp.GetAttempts()
		return e.statusErr()
	}
	v, err := jsonschema.Decode([]byte(text))
	if err != nil {
		return nil, fail("the reply is not valid JSON: %v", err)
	}
	if err := sch.Validate(v, "reply"); err != nil {
		return nil, fail("the reply does not match schema %s: %v", req.GetSchemaName(), err)
	}
	return &llmv1.CompleteObjectResponse{Object: text, Response: resp}, nil
}

// jsonText is the reply's text, without a Markdown code fence a model may
// have wrapped it in.
func jsonText(resp *llmv1.Response) string {
	var b strings.Builder
	for _, p := range resp.GetParts() {
		b.WriteString(p.GetText().GetText())
	}
	t := strings.TrimSpace(b.String())
	if strings.HasPrefix(t, "```") {
		t = strings.TrimPrefix(t, "```json")
		t = strings.TrimPrefix(t, "```")
		t = strings.TrimSuffix(strings.TrimSpace(t), "```")
	}
	return strings.TrimSpace(t)
}

// ListModels implements LLMGatewayService.ListModels: sorted by provider
// then model id, a page after the page token's (provider, model).
func (s *Service) ListModels(ctx context.Context, req *llmv1.ListModelsRequest) (*llmv1.ListModelsResponse, error) {
	if p := req.GetProviderId(); p != "" {
		if _, ok := s.cat.Provider(p); !ok {
			return nil, newError(codes.NotFound, llmv1.ErrorKind_ERROR_KIND_NOT_FOUND, "unknown provider %q", p).withReason("PROVIDER_UNKNOWN").statusErr()
		}
	}
	filter := paging.Filter(req.GetProviderId(), strconv.FormatBool(req.GetIncludeDisabled()))
	if _, err := paging.Decode(req.GetPageToken(), filter); err != nil {
		return nil, pageErr(err) // before discovery: a bad token costs no upstream call
	}
	models, warnings := s.listModels(ctx, req.GetProviderId(), req.GetIncludeDisabled())
	// Only the models the caller's token may call.
	if sub, ok := s.subject(ctx); ok && len(sub.Policy.GetModels()) > 0 {
		models = slices.DeleteFunc(slices.Clone(models), func(m *llmv1.Model) bool {
			return !sub.Policy.AllowsModel(m.GetProviderId() + "/" + m.GetModelId())
		})
	}
	key := func(m *llmv1.Model) []string { return []string{m.GetProviderId(), m.GetModelId()} }
	page, next, err := paging.Page(models, req, filter, key, paging.Ascending(key))
	if err != nil {
		return nil, pageErr(err)
	}
	d := s.cat.Defaults()
	canon := func(sel string) string {
		if r, err := s.cat.Resolve(sel); err == nil {
			return r.Canonical()
		}
		return ""
	}
	return &llmv1.ListModelsResponse{Models: page, Warnings: warnings, NextPageToken: next,
		DefaultModel: canon(d.Model), SmallModel: canon(d.SmallModel), ProbeModel: canon(d.ProbeModel)}, nil
}

// GetModel implements LLMGatewayService.GetModel: a catalogued or
// discovered model, enabled or not.
func (s *Service) GetModel(ctx context.Context, req *llmv1.GetModelRequest) (*llmv1.GetModelResponse, error) {
	if req.GetProviderId() == "" {
		return nil, invalidField("provider_id", "provider_id is required")
	}
	if req.GetModelId() == "" {
		return nil, invalidField("model_id", "model_id is required")
	}
	if _, ok := s.cat.Provider(req.GetProviderId()); !ok {
		return nil, newError(codes.NotFound, llmv1.ErrorKind_ERROR_KIND_NOT_FOUND, "unknown provider %q", req.GetProviderId()).withReason("PROVIDER_UNKNOWN").statusErr()
	}
	models, _ := s.listModels(ctx, req.GetProviderId(), true)
	for _, m := range models {
		if m.GetModelId() == req.GetModelId() {
			return &llmv1.GetModelResponse{Model: m}, nil
		}
	}
	return nil, newError(codes.NotFound, llmv1.ErrorKind_ERROR_KIND_NOT_FOUND, "provider %q has no model %q", req.GetProviderId(), req.GetModelId()).withReason("MODEL_NOT_FOUND").statusErr()
}

// pageErr answers a paging error on the field it is about.
func pageErr(err error) error {
	return invalidField(paging.Field(err), err.Error())
}

// invalidField is INVALID_ARGUMENT naming field, built like every other
// gateway error (ErrorDetail beside the BadRequest).
func invalidField(field, msg string) error { return invalid(field, "%s", msg).statusErr() }

// ResolveModel implements LLMGatewayService.ResolveModel.
func (s *Service) ResolveModel(_ context.Context, req *llmv1.ResolveModelRequest) (*llmv1.ResolveModelResponse, error) {
	r, err := s.resolve(req.GetSelector())
	if err != nil {
		return nil, catalogError("selector", err).statusErr()
	}
	return &llmv1.ResolveModelResponse{Canonical: r.Canonical(), Provider: r.Provider, Model: r.Model, Passthrough: r.Passthrough}, nil
}

// Authenticator checks the API key a caller of the compatible endpoints
// presents (a fabro token). The server wires its token check here.
type Authenticator interface {
	// Authenticate returns ctx carrying the caller's principal
	// (auth.WithPrincipal), which governance attributes the call to.
	Authenticate(ctx context.Context, token string) (context.Context, error)
}

// SetAuthenticator sets the compatible endpoints' key check; call before
// the server starts. Without one they refuse every key: they spend the
// vault's provider keys, so forgetting this must not open them.
func (s *Service) SetAuthenticator(a Authenticator) { s.auth = a }

// refuseAll is the compatible endpoints' key check when none was set.
type refuseAll struct{}

func (refuseAll) Authenticate(context.Context, string) (context.Context, error) {
	return nil, errors.New("llmgateway: no authenticator configured for the compatible endpoints")
}

// MountHTTP implements the server runtime's HTTPMounter: the OpenAI- and
// Anthropic-compatible APIs under /openai/ and /anthropic/.
func (s *Service) MountHTTP(mux *http.ServeMux) {
	var auth compat.Authenticator = refuseAll{}
	if s.auth != nil {
		auth = s.auth
	} else {
		s.logger.Warn("the OpenAI- and Anthropic-compatible endpoints have no token check: they refuse every key")
	}
	compat.New(s, auth, s.sealer, s.logger).Register(mux)
}

// newSealer seals envelopes under the key in path, or under a key in
// memory when path is empty.
func newSealer(ctx context.Context, path string, logger *slog.Logger) (*envelope.Sealer, error) {
	if path == "" {
		logger.InfoContext(ctx, "llmgateway seals round-trip state under a key in memory: clients' reasoning state from before a restart, or from another replica, is refused (set -llm-envelope-key-file to keep and share one)")
		return envelope.NewRandom(), nil
	}
	key, err := envelope.LoadKey(path)
	if err != nil {
		return nil, fmt.Errorf("llmgateway: %w", err)
	}
	return envelope.New(key)
}

// Generate runs one request in process, for the compatible endpoints: like
// Stream with emit, like Complete without. Errors are gRPC status errors
// with their ErrorDetail.
func (s *Service) Generate(ctx context.Context, req *llmv1.Request, emit func(*llmv1.StreamResponse) error) (*llmv1.Response, error) {
	resp, err := s.call(ctx, req, emit)
	if err != nil {
		return nil, toStatus(ctx, err)
	}
	return resp, nil
}
