package llmgateway

import (
	"net/http"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"google.golang.org/protobuf/testing/protocmp"
	"google.golang.org/protobuf/types/known/timestamppb"

	llmv1 "github.com/fabro-sh/fabro-go/gen/fabro/llm/v1"
)

func TestParseRateLimits(t *testing.T) {
	now := time.Date(2026, 1, 2, 3, 4, 5, 0, time.UTC)
	n := func(v int64) *int64 { return &v }
	ts := func(d time.Duration) *timestamppb.Timestamp { return timestamppb.New(now.Add(d)) }
	tests := []struct {
		name   string
		header map[string]string
		want   *llmv1.RateLimits
	}{
		{"none", nil, nil},
		{"openai, duration resets", map[string]string{
			"x-ratelimit-limit-requests": "500", "x-ratelimit-remaining-requests": "499", "x-ratelimit-reset-requests": "6m0s",
			"x-ratelimit-limit-tokens": "30000", "x-ratelimit-remaining-tokens": "29000", "x-ratelimit-reset-tokens": "120ms",
		}, &llmv1.RateLimits{RequestsLimit: n(500), RequestsRemaining: n(499), RequestsResetTime: ts(6 * time.Minute),
			TokensLimit: n(30000), TokensRemaining: n(29000), TokensResetTime: ts(120 * time.Millisecond)}},
		{"anthropic, RFC 3339 resets", map[string]string{
			"anthropic-ratelimit-requests-limit": "50", "anthropic-ratelimit-requests-remaining": "0",
			"anthropic-ratelimit-requests-reset": "2026-01-02T03:05:05Z", "anthropic-ratelimit-tokens-limit": "8000",
		}, &llmv1.RateLimits{RequestsLimit: n(50), RequestsRemaining: n(0), RequestsResetTime: ts(time.Minute), TokensLimit: n(8000)}},
		{"seconds reset", map[string]string{"x-ratelimit-reset-requests": "1.5"}, &llmv1.RateLimits{RequestsResetTime: ts(1500 * time.Millisecond)}},
		{"garbage is ignored", map[string]string{"x-ratelimit-limit-requests": "lots", "x-ratelimit-reset-tokens": "soon"}, nil},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			h := http.Header{}
			for k, v := range tt.header {
				h.Set(k, v)
			}
			if diff := cmp.Diff(tt.want, parseRateLimits(h, now), protocmp.Transform()); diff != "" {
				t.Errorf("(-want +got):\n%s", diff)
			}
		})
	}
}
