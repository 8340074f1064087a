package llmgateway

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"slices"
	"strconv"
	"sync"
	"time"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/types/known/durationpb"

	llmv1 "github.com/fabro-sh/fabro-go/gen/fabro/llm/v1"
	"github.com/fabro-sh/fabro-go/platform/paging"
)

// readinessProbeTimeout bounds each provider's probe in ListProviders.
const readinessProbeTimeout = 20 * time.Second

// ListProviders implements LLMGatewayService.ListProviders: the providers
// sorted by id, a page after the page token's id, and the readiness of
// each, probed in parallel when asked.
func (s *Service) ListProviders(ctx context.Context, req *llmv1.ListProvidersRequest) (*llmv1.ListProvidersResponse, error) {
	key := func(p *llmv1.Provider) []string { return []string{p.GetProviderId()} }
	filter := paging.Filter(strconv.FormatBool(req.GetIncludeDisabled()), strconv.FormatBool(req.GetProbe()))
	providers, next, err := paging.Page(s.cat.Providers(req.GetIncludeDisabled()), req, filter, key, paging.Ascending(key))
	if err != nil {
		return nil, pageErr(err)
	}
	out := &llmv1.ListProvidersResponse{Providers: providers, Readiness: make([]*llmv1.ProviderReadiness, len(providers)), NextPageToken: next}
	var wg sync.WaitGroup
	for i, p := range providers {
		wg.Go(func() { out.Readiness[i] = s.readiness(ctx, p, req.GetProbe()) })
	}
	wg.Wait()
	return out, nil
}

// GetProvider implements LLMGatewayService.GetProvider: one provider,
// enabled or not, with its readiness from credentials alone.
func (s *Service) GetProvider(ctx context.Context, req *llmv1.GetProviderRequest) (*llmv1.GetProviderResponse, error) {
	if req.GetProviderId() == "" {
		return nil, invalidField("provider_id", "provider_id is required")
	}
	p, ok := s.cat.Provider(req.GetProviderId())
	if !ok {
		return nil, newError(codes.NotFound, llmv1.ErrorKind_ERROR_KIND_NOT_FOUND, "unknown provider %q", req.GetProviderId()).withReason("PROVIDER_UNKNOWN").statusErr()
	}
	return &llmv1.GetProviderResponse{Provider: p, Readiness: s.readiness(ctx, p, false)}, nil
}

// probeModel is the model a provider's readiness probe uses.
func probeModel(p *llmv1.Provider) string {
	if m := p.GetProbeModel(); m != "" {
		return p.GetProviderId() + "/" + m
	}
	if m := p.GetDefaultModel(); m != "" {
		return p.GetProviderId() + "/" + m
	}
	return ""
}

func (s *Service) readiness(ctx context.Context, p *llmv1.Provider, probe bool) *llmv1.ProviderReadiness {
	r := &llmv1.ProviderReadiness{ProviderId: p.GetProviderId()}
	if !p.GetEnabled() {
		r.State = llmv1.ReadinessState_READINESS_STATE_DISABLED
		return r
	}
	if _, err := credentialsFor(ctx, s.creds, p); err != nil {
		var ge *gwError
		if errors.As(err, &ge) && len(ge.detail.GetMissingCredentials()) > 0 {
			r.State, r.MissingCredentials = llmv1.ReadinessState_READINESS_STATE_MISSING_CREDENTIALS, ge.detail.GetMissingCredentials()
			return r
		}
		r.State = llmv1.ReadinessState_READINESS_STATE_UNUSABLE
		r.Error = errorDetail(err)
		return r
	}
	if s.disc != nil && p.GetDiscovery() != llmv1.Discovery_DISCOVERY_UNSPECIFIED {
		// A discoverable provider needs no credentials to be called
		// ready, but its discovery tells whether anything listens.
		if st := s.disc.state(ctx, p); st.err != nil && st.unreachable {
			r.State = llmv1.ReadinessState_READINESS_STATE_UNREACHABLE
			r.Error = &llmv1.ErrorDetail{Kind: llmv1.ErrorKind_ERROR_KIND_NETWORK, ProviderId: p.GetProviderId(), Retryable: true, Message: st.err.Error()}
			return r
		}
	}
	r.State = llmv1.ReadinessState_READINESS_STATE_READY
	model := probeModel(p)
	if !probe || model == "" {
		return r
	}
	r.Probed, r.ProbeModel = true, model
	resp, err := s.Probe(ctx, &llmv1.ProbeRequest{Model: model, Mode: llmv1.ProbeMode_PROBE_MODE_BASIC, Timeout: durationpb.New(readinessProbeTimeout)})
	switch {
	case err != nil:
		r.State, r.Error = llmv1.ReadinessState_READINESS_STATE_UNUSABLE, errorDetail(err)
	case !resp.GetOk():
		r.State, r.Error = llmv1.ReadinessState_READINESS_STATE_UNUSABLE, resp.GetError()
	}
	return r
}

// errorDetail is the ErrorDetail of a gateway or status error.
func errorDetail(err error) *llmv1.ErrorDetail {
	var ge *gwError
	if errors.As(err, &ge) {
		return ge.detail
	}
	st := status.Convert(err)
	for _, d := range st.Details() {
		if ed, ok := d.(*llmv1.ErrorDetail); ok {
			return ed
		}
	}
	return &llmv1.ErrorDetail{Message: st.Message()}
}

// CredentialProbe is the outcome of probing one provider with a credential.
type CredentialProbe struct {
	Provider string // provider id
	Model    string // provider/model probed
	Latency  time.Duration
	Err      error // nil: the provider answered
}

// overrideCredentials resolves one name to a given value and the rest from
// a base source.
type overrideCredentials struct {
	name, value string
	base        Credentials
}

func (o overrideCredentials) Resolve(ctx context.Context, names []string) (map[string]string, []string, error) {
	values, missing, err := o.base.Resolve(ctx, names)
	if err != nil {
		return nil, nil, err
	}
	if values == nil {
		values = map[string]string{}
	}
	if slices.Contains(names, o.name) {
		values[o.name] = o.value
		missing = slices.DeleteFunc(missing, func(n string) bool { return n == o.name })
	}
	return values, missing, nil
}

// ProbeCredential runs the basic probe of every enabled provider that reads
// the credential name, with value standing in for it (the other credentials
// a provider needs come from cfg: its vault or environment). It returns one
// result per provider probed, none when no provider uses the name: `fabro
// secret set` checks a key this way before storing it.
func ProbeCredential(ctx context.Context, cfg Config, name, value string, logger *slog.Logger) ([]CredentialProbe, error) {
	s, err := New(ctx, cfg, logger)
	if err != nil {
		return nil, err
	}
	defer s.Close()
	s.creds = overrideCredentials{name: name, value: value, base: s.creds}
	var out []CredentialProbe
	for _, p := range s.cat.Providers(false) {
		if !slices.Contains(p.GetAuth().GetCredentialNames(), name) {
			continue
		}
		model := probeModel(p)
		if model == "" {
			continue
		}
		res := CredentialProbe{Provider: p.GetProviderId(), Model: model}
		resp, err := s.Probe(ctx, &llmv1.ProbeRequest{Model: model, Mode: llmv1.ProbeMode_PROBE_MODE_BASIC})
		switch {
		case err != nil:
			res.Err = errors.New(status.Convert(err).Message())
		case !resp.GetOk():
			res.Err = errors.New(resp.GetError().GetMessage())
			res.Latency = resp.GetLatency().AsDuration()
		default:
			res.Latency = resp.GetLatency().AsDuration()
		}
		out = append(out, res)
	}
	return out, nil
}

// String describes a probe result in one line.
func (c CredentialProbe) String() string {
	if c.Err != nil {
		return fmt.Sprintf("%s (%s): %v", c.Provider, c.Model, c.Err)
	}
	return fmt.Sprintf("%s (%s): ok in %s", c.Provider, c.Model, c.Latency.Round(time.Millisecond))
}
