package llmgateway

import (
	"net/http"
	"strconv"
	"time"

	"google.golang.org/protobuf/types/known/timestamppb"

	llmv1 "github.com/fabro-sh/fabro-go/gen/fabro/llm/v1"
)

// parseRateLimits reads the provider's rate-limit headers: OpenAI style
// (x-ratelimit-limit-requests, reset as a duration such as "6m0s") and
// Anthropic style (anthropic-ratelimit-requests-limit, reset as RFC 3339).
// It returns nil when there are none.
func parseRateLimits(h http.Header, now time.Time) *llmv1.RateLimits {
	rl := &llmv1.RateLimits{}
	found := false
	num := func(names ...string) *int64 {
		for _, n := range names {
			if v := h.Get(n); v != "" {
				if i, err := strconv.ParseInt(v, 10, 64); err == nil {
					found = true
					return &i
				}
			}
		}
		return nil
	}
	reset := func(names ...string) *timestamppb.Timestamp {
		for _, n := range names {
			v := h.Get(n)
			if v == "" {
				continue
			}
			if t, err := time.Parse(time.RFC3339, v); err == nil {
				found = true
				return timestamppb.New(t)
			}
			if d, err := time.ParseDuration(v); err == nil {
				found = true
				return timestamppb.New(now.Add(d))
			}
			if secs, err := strconv.ParseFloat(v, 64); err == nil {
				found = true
				return timestamppb.New(now.Add(time.Duration(secs * float64(time.Second))))
			}
		}
		return nil
	}
	rl.RequestsLimit = num("x-ratelimit-limit-requests", "anthropic-ratelimit-requests-limit")
	rl.RequestsRemaining = num("x-ratelimit-remaining-requests", "anthropic-ratelimit-requests-remaining")
	rl.RequestsResetTime = reset("x-ratelimit-reset-requests", "anthropic-ratelimit-requests-reset")
	rl.TokensLimit = num("x-ratelimit-limit-tokens", "anthropic-ratelimit-tokens-limit")
	rl.TokensRemaining = num("x-ratelimit-remaining-tokens", "anthropic-ratelimit-tokens-remaining")
	rl.TokensResetTime = reset("x-ratelimit-reset-tokens", "anthropic-ratelimit-tokens-reset")
	if !found {
		return nil
	}
	return rl
}
