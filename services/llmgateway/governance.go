package llmgateway

import (
	"context"
	"fmt"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"google.golang.org/grpc/codes"
	"google.golang.org/protobuf/types/known/durationpb"

	llmv1 "github.com/fabro-sh/fabro-go/gen/fabro/llm/v1"
	"github.com/fabro-sh/fabro-go/platform/auth"
	"github.com/fabro-sh/fabro-go/services/llmgateway/internal/catalog"
	"github.com/fabro-sh/fabro-go/services/llmgateway/internal/governance"
)

// PolicySource gives a token's governance policy by its public id;
// *auth.Store is one.
type PolicySource interface {
	Policy(tokenID string) *auth.Policy
}

// SetPolicies sets where token policies come from (the server's token
// store); call before the server starts. Without it no call is limited,
// though spend is still attributed.
func (s *Service) SetPolicies(p PolicySource) { s.policies = p }

func (s *Service) startGovernance(ctx context.Context, cfg Config) error {
	s.principalLims = cfg.PrincipalLimits
	if s.principalLims == nil && cfg.PrincipalLimitsFile != "" {
		lims, err := LoadPrincipalLimits(cfg.PrincipalLimitsFile)
		if err != nil {
			return fmt.Errorf("llmgateway: -llm-principal-limits: %w", err)
		}
		s.principalLims = lims
	}
	js := cfg.GovernanceJetStream
	if js == nil && cfg.GovernanceNATSURL != "" {
		nc, err := nats.Connect(cfg.GovernanceNATSURL, nats.Name("fabro-llmgateway-governance"), nats.MaxReconnects(-1))
		if err != nil {
			return fmt.Errorf("llmgateway: governance NATS: %w", err)
		}
		s.closers = append(s.closers, func() error { nc.Close(); return nil })
		if js, err = jetstream.New(nc); err != nil {
			return fmt.Errorf("llmgateway: governance NATS: %w", err)
		}
	}
	if js == nil {
		s.logger.InfoContext(ctx, "llmgateway keeps token spend and rate limits in memory: lost on restart, not shared with replicas (set -llm-governance-nats-url)")
	}
	lctx, cancel := context.WithTimeout(ctx, 30*time.Second)
	defer cancel()
	gov, err := governance.New(lctx, governance.Options{JetStream: js, Now: cfg.GovernanceNow, Logger: s.logger})
	if err != nil {
		return fmt.Errorf("llmgateway: %w", err)
	}
	s.gov = gov
	// Before the NATS connection closes (closers run in order).
	s.closers = append([]func() error{gov.Close}, s.closers...)
	return nil
}

// subject is the caller governance counts the call against; ok is false for
// a call without a principal (no authentication configured).
func (s *Service) subject(ctx context.Context) (governance.Subject, bool) {
	p, ok := auth.FromContext(ctx)
	if !ok || s.gov == nil || p.TokenID == "" {
		return governance.Subject{}, false
	}
	sub := governance.Subject{TokenID: p.TokenID, Principal: p.String()}
	sub.PrincipalPolicy = s.principalLims[sub.Principal]
	if s.policies != nil {
		sub.Policy = s.policies.Policy(p.TokenID)
	}
	return sub, true
}

// admit checks the call against its token's policy before any upstream
// request: nil ticket when there is nothing to govern.
func (s *Service) admit(ctx context.Context, route catalog.Route) (governance.Subject, *governance.Ticket, *gwError) {
	sub, ok := s.subject(ctx)
	if !ok {
		return sub, nil, nil
	}
	tk, err := s.gov.Check(ctx, sub, route.Canonical())
	if err == nil {
		return sub, tk, nil
	}
	r, _ := err.(*governance.Refusal)
	if r == nil {
		return sub, nil, newError(codes.Internal, llmv1.ErrorKind_ERROR_KIND_UNSPECIFIED, "governance: %v", err)
	}
	var e *gwError
	if r.Reason == governance.ReasonModel {
		e = newError(codes.PermissionDenied, llmv1.ErrorKind_ERROR_KIND_PERMISSION, "%s", r.Message)
	} else {
		e = newError(codes.ResourceExhausted, llmv1.ErrorKind_ERROR_KIND_RATE_LIMIT, "%s", r.Message)
		e.detail.Retryable = true
		e.detail.RetryAfter = durationpb.New(r.RetryAfter.Round(time.Second))
		if e.detail.RetryAfter.AsDuration() < time.Second {
			e.detail.RetryAfter = durationpb.New(time.Second)
		}
	}
	e.detail.ProviderId, e.detail.ModelId = route.Provider.GetProviderId(), route.Model.GetModelId()
	return sub, nil, e.withReason(string(r.Reason))
}

// settle reconciles a governed call with what it used: the Response, or
// the partial one of a stream that failed after output.
func settle(ctx context.Context, tk *governance.Ticket, resp *llmv1.Response) {
	u := resp.GetUsage()
	model := ""
	if resp.GetProviderId() != "" {
		model = resp.GetProviderId() + "/" + resp.GetModelId()
	}
	tk.Done(context.WithoutCancel(ctx), u.GetInputTokens()+u.GetOutputTokens(), resp.GetCost().GetTotalUsdMicros(), model)
}

// RateUsage is the caller's per-minute limits and what remains of them,
// for the compatible endpoints' rate-limit headers.
func (s *Service) RateUsage(ctx context.Context) (governance.Usage, bool) {
	sub, ok := s.subject(ctx)
	if !ok {
		return governance.Usage{}, false
	}
	return s.gov.RateUsage(sub)
}
