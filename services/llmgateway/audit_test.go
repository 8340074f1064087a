package llmgateway

import (
	"bytes"
	"log/slog"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	llmv1 "github.com/fabro-sh/fabro-go/gen/fabro/llm/v1"
	"github.com/fabro-sh/fabro-go/services/llmgateway/internal/catalog"
	"github.com/fabro-sh/fabro-go/services/llmgateway/internal/codec"
)

func TestDefaultBackoff(t *testing.T) {
	tests := []struct {
		attempt    int
		retryAfter time.Duration
		lo, hi     time.Duration
	}{
		{1, 0, 125 * time.Millisecond, 250 * time.Millisecond},
		{2, 0, 250 * time.Millisecond, 500 * time.Millisecond},
		{3, 0, 500 * time.Millisecond, time.Second},
		{10, 0, 4 * time.Second, 8 * time.Second}, // capped
		{1, 20 * time.Second, 20 * time.Second, 20 * time.Second},
	}
	for _, tt := range tests {
		seen := map[time.Duration]bool{}
		for range 200 {
			d := DefaultBackoff(tt.attempt, tt.retryAfter)
			if d < tt.lo || d > tt.hi {
				t.Fatalf("DefaultBackoff(%d, %v) = %v, want in [%v, %v]", tt.attempt, tt.retryAfter, d, tt.lo, tt.hi)
			}
			seen[d] = true
		}
		if tt.lo != tt.hi && len(seen) < 2 {
			t.Errorf("DefaultBackoff(%d, %v): no jitter", tt.attempt, tt.retryAfter)
		}
	}
}

// TestKindPolicies checks every error kind's gRPC code and retry and
// failover flags against the ErrorKind comments in types.proto.
func TestKindPolicies(t *testing.T) {
	type pol struct {
		Code                codes.Code
		Retryable, Failover bool
	}
	want := map[llmv1.ErrorKind]pol{
		llmv1.ErrorKind_ERROR_KIND_AUTHENTICATION:  {codes.FailedPrecondition, false, true},
		llmv1.ErrorKind_ERROR_KIND_PERMISSION:      {codes.PermissionDenied, false, true},
		llmv1.ErrorKind_ERROR_KIND_NOT_FOUND:       {codes.NotFound, false, true},
		llmv1.ErrorKind_ERROR_KIND_INVALID_REQUEST: {codes.InvalidArgument, false, false},
		llmv1.ErrorKind_ERROR_KIND_CONTEXT_LENGTH:  {codes.OutOfRange, false, true},
		llmv1.ErrorKind_ERROR_KIND_CONTENT_FILTER:  {codes.FailedPrecondition, false, false},
		llmv1.ErrorKind_ERROR_KIND_RATE_LIMIT:      {codes.ResourceExhausted, true, true},
		llmv1.ErrorKind_ERROR_KIND_OVERLOADED:      {codes.Unavailable, true, true},
		llmv1.ErrorKind_ERROR_KIND_SERVER:          {codes.Unavailable, true, true},
		llmv1.ErrorKind_ERROR_KIND_TIMEOUT:         {codes.DeadlineExceeded, true, true},
		llmv1.ErrorKind_ERROR_KIND_NETWORK:         {codes.Unavailable, true, true},
		llmv1.ErrorKind_ERROR_KIND_STREAM_DECODE:   {codes.Unavailable, true, true},
		llmv1.ErrorKind_ERROR_KIND_CANCELLED:       {codes.Canceled, false, false},
		llmv1.ErrorKind_ERROR_KIND_RESPONSE_DECODE: {codes.Unavailable, false, false},
		llmv1.ErrorKind_ERROR_KIND_UNSPECIFIED:     {codes.Internal, false, false},
	}
	if n := len(llmv1.ErrorKind_name); n != len(want) {
		t.Fatalf("ErrorKind has %d values, the table %d: classify the new ones", n, len(want))
	}
	route := catalog.Route{Provider: &llmv1.Provider{ProviderId: "p"}, Model: &llmv1.Model{ModelId: "m", ProviderId: "p"}}
	got := map[llmv1.ErrorKind]pol{}
	for k := range want {
		e := fromCodecError(&codec.Error{Kind: k, Message: "x", RetryAfter: time.Second}, route)
		st := status.Convert(e.statusErr())
		got[k] = pol{st.Code(), e.detail.GetRetryable(), e.detail.GetFailoverEligible()}
		if e.detail.GetRetryAfter().AsDuration() != time.Second || e.detail.GetKind() != k {
			t.Errorf("%v: detail %v", k, e.detail)
		}
	}
	if diff := cmp.Diff(want, got); diff != "" {
		t.Errorf("policies (-want +got):\n%s", diff)
	}
}

func TestResolveModelRPC(t *testing.T) {
	client := dial(t, newGateway(t, newUpstream(t)))
	for _, sel := range []string{"f1", "fake-1", "fake/fake-1"} {
		r, err := client.ResolveModel(t.Context(), &llmv1.ResolveModelRequest{Selector: sel})
		if err != nil {
			t.Fatalf("%s: %v", sel, err)
		}
		if r.GetCanonical() != "fake/fake-1" || r.GetProvider().GetProviderId() != "fake" || r.GetModel().GetModelId() != "fake-1" {
			t.Errorf("%s resolved to %v", sel, r)
		}
	}
	_, err := client.ResolveModel(t.Context(), &llmv1.ResolveModelRequest{Selector: "fake/fake-3"})
	if status.Code(err) != codes.NotFound || len(detailOf(t, err).GetHints()) == 0 {
		t.Errorf("unknown model: %v", err)
	}
	_, err = client.ResolveModel(t.Context(), &llmv1.ResolveModelRequest{Selector: "off/off-1"})
	if status.Code(err) != codes.FailedPrecondition {
		t.Errorf("disabled provider: %v", err)
	}
}

// TestCredentialsNeverLogged runs retries, failover and a failure with
// debug logging on and checks no credential value reaches the log.
func TestCredentialsNeverLogged(t *testing.T) {
	var buf bytes.Buffer
	u := newUpstream(t, turn{status: 429}, turn{status: 401}, textTurn("ok"), turn{status: 500}, turn{status: 400})
	gw := newGateway(t, u)
	gw.logger = slog.New(slog.NewTextHandler(&buf, &slog.HandlerOptions{Level: slog.LevelDebug}))
	client := dial(t, gw)
	if _, err := client.Complete(t.Context(), &llmv1.CompleteRequest{Request: userReq("f1", "hi")}); err != nil {
		t.Fatal(err)
	}
	req := userReq("f1", "hi")
	req.DisableFallbacks = true
	_, _ = client.Complete(t.Context(), &llmv1.CompleteRequest{Request: req})
	if buf.Len() == 0 {
		t.Fatal("nothing was logged; the test proves nothing")
	}
	for _, v := range testEnv {
		if strings.Contains(buf.String(), v) {
			t.Errorf("log holds credential %q:\n%s", v, buf.String())
		}
	}
}
