package llmgateway

import (
	"context"
	cryptorand "crypto/rand"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"maps"
	"math"
	"math/rand/v2"
	"net/http"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"go.opentelemetry.io/otel"
	"go.opentelemetry.io/otel/attribute"
	otelcodes "go.opentelemetry.io/otel/codes"
	"go.opentelemetry.io/otel/propagation"
	"go.opentelemetry.io/otel/trace"
	"google.golang.org/grpc/codes"
	"google.golang.org/protobuf/types/known/durationpb"

	llmv1 "github.com/fabro-sh/fabro-go/gen/fabro/llm/v1"
	"github.com/fabro-sh/fabro-go/platform/auth"
	"github.com/fabro-sh/fabro-go/platform/jsonschema"
	"github.com/fabro-sh/fabro-go/services/llmgateway/internal/catalog"
	"github.com/fabro-sh/fabro-go/services/llmgateway/internal/codec"
	"github.com/fabro-sh/fabro-go/services/llmgateway/internal/governance"
)

// maxLoggedBody bounds the upstream error body logged at debug level.
const maxLoggedBody = 4 << 10

// DefaultBackoff is the wait before retry attempt+1 of a route: exponential
// from 250 ms, capped at 8 s, with jitter over the upper half, and never
// shorter than the provider's Retry-After.
func DefaultBackoff(attempt int, retryAfter time.Duration) time.Duration {
	d := 250 * time.Millisecond << min(attempt-1, 5)
	d = min(d, 8*time.Second)
	d = d/2 + rand.N(d/2+1)
	return max(d, retryAfter)
}

// call runs a request: resolve, then attempts with retries per route and
// failover across routes. With emit (Stream) it sends the stream's events,
// its terminal event included, and returns an error only when nothing was
// sent; without emit (Complete) it returns the Response or the error.
func (s *Service) call(ctx context.Context, req *llmv1.Request, emit func(*llmv1.StreamResponse) error) (_ *llmv1.Response, err error) {
	if err := validateRequest(req); err != nil {
		return nil, err
	}
	primary, err := s.resolve(req.GetModel())
	if err != nil {
		return nil, catalogError("request.model", err)
	}
	// The token's policy is checked before any upstream request, and the
	// call's usage counted once it ends, however it ends.
	sub, ticket, gerr := s.admit(ctx, primary)
	if gerr != nil {
		return nil, gerr
	}
	if ticket != nil {
		var used *llmv1.Response
		if inner := emit; inner != nil {
			emit = func(ev *llmv1.StreamResponse) error {
				switch e := ev.GetEvent().(type) {
				case *llmv1.StreamResponse_Ended:
					used = e.Ended.GetResponse()
				case *llmv1.StreamResponse_Error:
					used = e.Error.GetPartialResponse()
				}
				return inner(ev)
			}
		}
		defer func() { settle(ctx, ticket, used) }()
		if emit == nil {
			return s.callRoutes(ctx, req, primary, sub, nil, func(r *llmv1.Response) { used = r })
		}
	}
	return s.callRoutes(ctx, req, primary, sub, emit, nil)
}

// callRoutes is call after admission: with retries per route and failover
// across the routes the caller's policy allows; done sees a unary call's
// Response.
func (s *Service) callRoutes(ctx context.Context, req *llmv1.Request, primary catalog.Route, sub governance.Subject,
	emit func(*llmv1.StreamResponse) error, done func(*llmv1.Response)) (*llmv1.Response, error) {
	var err error
	selectors := req.GetFallbacks()
	if len(selectors) == 0 {
		selectors = primary.Model.GetFallbacks()
	}
	if req.GetDisableFallbacks() {
		selectors = nil
	}
	if err := s.checkS3Images(req); err != nil {
		return nil, err
	}
	if req, err = s.openOpaque(ctx, req, func() map[string]bool { return s.planRoutes(primary, selectors) }); err != nil {
		return nil, err
	}

	total := 0
	var last *gwError
	var tried []string // "route: error" of each route's last failure
	for ri := 0; ri <= len(selectors); ri++ {
		route := primary
		if ri > 0 {
			if route, err = s.resolve(selectors[ri-1]); err != nil {
				s.logger.WarnContext(ctx, "skipping fallback route", "selector", selectors[ri-1], "error", err)
				continue
			}
			if !sub.Policy.AllowsModel(route.Canonical()) {
				s.logger.InfoContext(ctx, "skipping fallback route outside the token's model list", "route", route.Canonical())
				continue
			}
			s.logger.InfoContext(ctx, "failing over", "from", primary.Canonical(), "to", route.Canonical(), "error_kind", last.detail.GetKind().String())
			failoverEvent(ctx, primary, route, last.detail.GetKind())
			if err := s.retrying(emit, total, last, 0, route); err != nil {
				return nil, err
			}
		}
		for attempt := 1; attempt <= s.maxAttempts; attempt++ {
			total++
			resp, partial, gerr := s.attempt(ctx, route, req, emit, attempt)
			if gerr == nil {
				resp.Attempts = int32(attempt)
				if emit != nil {
					return resp, emit(&llmv1.StreamResponse{Event: &llmv1.StreamResponse_Ended{Ended: &llmv1.Ended{Response: resp}}})
				}
				if done != nil {
					done(resp)
				}
				return resp, nil
			}
			gerr.detail.Attempts = int32(total)
			if partial != nil { // output was seen: no retry, no failover
				partial.Attempts = int32(attempt)
				return nil, emit(&llmv1.StreamResponse{Event: &llmv1.StreamResponse_Error{Error: &llmv1.StreamError{Error: gerr.detail, PartialResponse: partial}}})
			}
			if ri > 0 && last != nil && len(gerr.detail.GetMissingCredentials()) > 0 {
				// A fallback without credentials was never really tried: the
				// caller needs the error of the route that was, not a hint
				// to configure a provider they may never have meant to use.
				s.logger.InfoContext(ctx, "skipping fallback route without credentials", "route", route.Canonical(),
					"missing", gerr.detail.GetMissingCredentials())
				break
			}
			if last == nil || len(tried) == 0 || !strings.HasPrefix(tried[len(tried)-1], route.Canonical()+": ") {
				tried = append(tried, route.Canonical()+": "+strings.TrimPrefix(gerr.detail.GetMessage(), route.Canonical()+": "))
			} else {
				tried[len(tried)-1] = route.Canonical() + ": " + strings.TrimPrefix(gerr.detail.GetMessage(), route.Canonical()+": ")
			}
			last = gerr
			if ctx.Err() != nil || !gerr.detail.GetRetryable() || attempt == s.maxAttempts {
				break
			}
			ra := gerr.retryAfter()
			if ra > s.maxRetryAfter {
				break // waiting that long is worse than another route
			}
			wait := s.backoff(attempt, ra)
			s.logger.DebugContext(ctx, "retrying", "route", route.Canonical(), "attempt", attempt, "wait", wait, "error_kind", gerr.detail.GetKind().String())
			retryEvent(ctx, route, attempt, wait, gerr)
			if err := s.retrying(emit, total, gerr, wait, route); err != nil {
				return nil, err
			}
			if err := sleep(ctx, wait); err != nil {
				return nil, classify(ctx, err, route)
			}
		}
		if ctx.Err() != nil || !last.detail.GetFailoverEligible() {
			break
		}
	}
	if last == nil { // every fallback failed to resolve and so did nothing
		return nil, newError(codes.Internal, llmv1.ErrorKind_ERROR_KIND_UNSPECIFIED, "no route could be tried")
	}
	if len(tried) > 1 {
		// The caller sees every route tried, not only the last one's error.
		last.detail.Message = fmt.Sprintf("all %d routes failed: %s", len(tried), strings.Join(tried, "; "))
	}
	return nil, last
}

// retrying tells a stream's caller that an attempt failed before any output
// and another follows (after wait, on next), so an agent can show it.
func (s *Service) retrying(emit func(*llmv1.StreamResponse) error, attempt int, gerr *gwError, wait time.Duration, next catalog.Route) error {
	if emit == nil || gerr == nil {
		return nil
	}
	return emit(&llmv1.StreamResponse{Event: &llmv1.StreamResponse_Retrying{Retrying: &llmv1.Retrying{
		Attempt: int32(attempt), Error: gerr.detail, Wait: durationpb.New(wait), NextRoute: next.Canonical(),
	}}})
}

// routeRequest adapts the request to one route: the catalog's output limit
// when the caller gave none, the schema as a prompt for a model without
// native structured output, and no signatures another provider made (which
// this one would reject). It returns req itself when nothing changes, and
// the warnings the Response must carry.
func routeRequest(route catalog.Route, req *llmv1.Request) (*llmv1.Request, []string) {
	pid := route.Provider.GetProviderId()
	needLimit := req.MaxOutputTokens == nil && route.Model.GetMaxOutputTokens() > 0
	caps := route.Model.GetCapabilities()
	promptSchema := caps != nil && !caps.GetStructuredOutput() &&
		req.GetResponseFormat().GetType() == llmv1.ResponseFormatType_RESPONSE_FORMAT_TYPE_JSON_SCHEMA
	foreign := map[string]int{}
	for _, m := range req.GetMessages() {
		for _, p := range m.GetParts() {
			if o := signatureOrigin(p); o != "" && o != pid {
				foreign[o]++
			}
		}
	}
	if !needLimit && !promptSchema && len(foreign) == 0 {
		return req, nil
	}
	r := cloneRequest(req)
	var warnings []string
	if needLimit {
		n := int32(min(route.Model.GetMaxOutputTokens(), math.MaxInt32))
		r.MaxOutputTokens = &n
	}
	if promptSchema {
		rf := r.GetResponseFormat()
		r.System = strings.TrimSpace(r.GetSystem() + "\n\n" + schemaPrompt(rf.GetName(), rf.GetSchema()))
		r.ResponseFormat = &llmv1.ResponseFormat{Type: llmv1.ResponseFormatType_RESPONSE_FORMAT_TYPE_JSON_OBJECT}
		warnings = append(warnings, fmt.Sprintf("%s has no native structured output: the schema %s was given as instructions and the reply validated against it", route.Canonical(), rf.GetName()))
	}
	if len(foreign) > 0 {
		for _, m := range r.GetMessages() {
			kept := m.Parts[:0]
			for _, p := range m.GetParts() {
				o := signatureOrigin(p)
				if o == "" || o == pid {
					kept = append(kept, p)
					continue
				}
				switch x := p.GetPart().(type) {
				case *llmv1.ContentPart_Reasoning:
					continue // another provider's reasoning is not input here
				case *llmv1.ContentPart_Text:
					x.Text.Signature, x.Text.SignatureOrigin = "", ""
				case *llmv1.ContentPart_ToolCall:
					x.ToolCall.Signature, x.ToolCall.SignatureOrigin = "", ""
				}
				kept = append(kept, p)
			}
			m.Parts = kept
		}
		for _, o := range slices.Sorted(maps.Keys(foreign)) {
			warnings = append(warnings, fmt.Sprintf("dropped %d signature(s) made by %s: only %s accepts them, and this turn went to %s", foreign[o], o, o, route.Canonical()))
		}
	}
	return r, warnings
}

// signatureOrigin is the provider that signed a part, "" when unsigned.
func signatureOrigin(p *llmv1.ContentPart) string {
	switch x := p.GetPart().(type) {
	case *llmv1.ContentPart_Reasoning:
		if x.Reasoning.GetSignature() != "" || x.Reasoning.GetRedacted() {
			return x.Reasoning.GetSignatureOrigin()
		}
	case *llmv1.ContentPart_Text:
		if x.Text.GetSignature() != "" {
			return x.Text.GetSignatureOrigin()
		}
	case *llmv1.ContentPart_ToolCall:
		if x.ToolCall.GetSignature() != "" {
			return x.ToolCall.GetSignatureOrigin()
		}
	}
	return ""
}

// schemaPrompt asks for JSON matching the schema, for models that cannot be
// held to it natively.
func schemaPrompt(name, schema string) string {
	return "Reply with only a JSON value, no prose and no Markdown fence, that matches this JSON Schema (named " + name + "):\n" + schema
}

func sleep(ctx context.Context, d time.Duration) error {
	if d <= 0 {
		return ctx.Err()
	}
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-t.C:
		return nil
	case <-ctx.Done():
		return ctx.Err()
	}
}

// attempt makes one upstream call. On failure it returns the classified
// error, and the partial response when the caller already saw output.
func (s *Service) attempt(ctx context.Context, route catalog.Route, req *llmv1.Request, emit func(*llmv1.StreamResponse) error, n int) (resp, partial *llmv1.Response, gerr *gwError) {
	ctx, span := s.tracer.Start(ctx, "chat "+route.Model.GetModelId(), trace.WithSpanKind(trace.SpanKindClient),
		trace.WithAttributes(
			attribute.String("gen_ai.operation.name", "chat"),
			attribute.String("gen_ai.system", route.Provider.GetProviderId()),
			attribute.String("gen_ai.provider.name", route.Provider.GetProviderId()),
			attribute.String("gen_ai.request.model", route.Model.GetModelId()),
			attribute.Int("fabro.llm.attempt", n),
			attribute.Bool("fabro.llm.stream", emit != nil),
		))
	if req.MaxOutputTokens != nil {
		span.SetAttributes(attribute.Int("gen_ai.request.max_tokens", int(req.GetMaxOutputTokens())))
	}
	if req.Temperature != nil {
		span.SetAttributes(attribute.Float64("gen_ai.request.temperature", req.GetTemperature()))
	}
	for k, v := range req.GetMetadata() {
		span.SetAttributes(attribute.String("fabro.llm.metadata."+k, v))
	}
	start := time.Now()
	defer func() {
		recordAttempt(ctx, route, start, gerr)
		if gerr != nil {
			span.SetAttributes(attribute.String("error.type", gerr.detail.GetKind().String()))
			span.SetStatus(otelcodes.Error, gerr.detail.GetMessage())
		}
		span.End()
	}()

	resp, partial, err := s.exchange(ctx, route, req, emit, span)
	if err != nil {
		return nil, partial, classify(ctx, err, route)
	}
	span.SetAttributes(
		attribute.String("gen_ai.response.model", resp.GetModelId()),
		attribute.String("gen_ai.response.id", resp.GetId()),
		attribute.Int64("gen_ai.usage.input_tokens", resp.GetUsage().GetInputTokens()+resp.GetUsage().GetCacheReadTokens()+resp.GetUsage().GetCacheWriteTokens()),
		attribute.Int64("gen_ai.usage.output_tokens", resp.GetUsage().GetOutputTokens()),
		attribute.StringSlice("gen_ai.response.finish_reasons", []string{finishName(resp.GetFinishReason())}),
		attribute.Int64("gen_ai.usage.cache_read.input_tokens", resp.GetUsage().GetCacheReadTokens()),
		attribute.Int64("gen_ai.usage.cache_creation.input_tokens", resp.GetUsage().GetCacheWriteTokens()),
	)
	recordUsage(ctx, route, resp)
	if c := resp.GetCost(); c != nil {
		span.SetAttributes(attribute.Int64("fabro.llm.cost_usd_micros", c.GetTotalUsdMicros()))
	}
	return resp, nil, nil
}

func finishName(f llmv1.FinishReason) string {
	return strings.ToLower(strings.TrimPrefix(f.String(), "FINISH_REASON_"))
}

// exchange sends the HTTP request and assembles the reply.
func (s *Service) exchange(ctx context.Context, route catalog.Route, req *llmv1.Request, emit func(*llmv1.StreamResponse) error, span trace.Span) (_ *llmv1.Response, _ *llmv1.Response, err error) {
	cd, ok := s.codecs[route.Provider.GetCodec()]
	if !ok {
		return nil, nil, newError(codes.FailedPrecondition, llmv1.ErrorKind_ERROR_KIND_UNSPECIFIED,
			"provider %s speaks %s, which this gateway has no codec for", route.Provider.GetProviderId(), route.Provider.GetCodec()).withReason("CODEC_UNSUPPORTED")
	}
	creds, cached, err := s.credentials(ctx, route.Provider)
	if err != nil {
		return nil, nil, err
	}
	// Every error of the exchange leaves here checked and stripped of the
	// credentials just sent: an upstream may echo them, in any shape, in its
	// error bodies and events.
	redactor := lazyRedactor(creds)
	defer func() { err = checkedError(err, redactor) }()
	// The attempt's own context, so that a stalled body can be cut.
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	routed, warnings := routeRequest(route, req)
	// A stream's headers come at once, so waiting for them counts as idle;
	// a unary reply's come after the whole generation, which the
	// transport's ResponseHeaderTimeout bounds instead.
	idleTimeout := s.idleTimeout
	if d := route.Provider.GetIdleTimeout(); d != nil && d.AsDuration() > 0 {
		idleTimeout = d.AsDuration()
	}
	var idle *idleWatch
	if emit != nil {
		idle = watchIdle(idleTimeout, cancel)
		defer idle.stop()
	}
	var sent time.Time
	var hresp *http.Response
	for try := 0; ; try++ {
		hreq, err := cd.NewRequest(ctx, &codec.Call{Provider: route.Provider, Model: route.APIModel(), Request: routed, Credentials: creds, Stream: emit != nil})
		if err != nil {
			return nil, nil, err
		}
		// The provider may trace too: it gets the attempt's trace context.
		otel.GetTextMapPropagator().Inject(ctx, propagation.HeaderCarrier(hreq.Header))
		sent = time.Now()
		hresp, err = s.http.Do(hreq)
		if err != nil {
			if idle != nil {
				err = idle.explain(err)
			}
			return nil, nil, err
		}
		if hresp.StatusCode != http.StatusUnauthorized || s.credCache == nil {
			break
		}
		s.credCache.forget(route.Provider.GetProviderId()) // whoever resolves next asks the vault
		if try > 0 || !cached {
			break // the key was fresh: the provider refuses what the vault holds
		}
		// The key was remembered, and may have been rotated since: this
		// attempt is made again, once, with what the vault holds now.
		// Nothing was streamed to the caller (the refusal comes before any
		// body), so the caller sees one attempt.
		fresh, _, ferr := s.credentials(ctx, route.Provider)
		if ferr != nil || maps.Equal(fresh, creds) {
			break // answer the 401 itself, not the vault's trouble
		}
		_, _ = io.Copy(io.Discard, io.LimitReader(hresp.Body, 1<<20))
		hresp.Body.Close()
		creds, redactor = fresh, lazyRedactor(fresh)
		span.AddEvent("credentials refreshed after a 401")
	}
	defer hresp.Body.Close()
	if hresp.StatusCode < 200 || hresp.StatusCode > 299 {
		body, _ := io.ReadAll(io.LimitReader(hresp.Body, 1<<20))
		if s.logger.Enabled(ctx, slog.LevelDebug) {
			// The operator's copy of what the caller sees only as checked
			// fields: masked, and bounded.
			s.logger.DebugContext(ctx, "upstream error body", "route", route.Canonical(), "status", hresp.StatusCode,
				"body", redactor().String(string(body[:min(len(body), maxLoggedBody)])))
		}
		ce := cd.ParseError(hresp, body)
		if ce == nil {
			ce = &codec.Error{Kind: kindForStatus(hresp.StatusCode), Message: http.StatusText(hresp.StatusCode), StatusCode: hresp.StatusCode}
		}
		if ce.RetryAfter == 0 {
			ce.RetryAfter = parseRetryAfter(hresp.Header.Get("Retry-After"), time.Now())
		}
		span.SetAttributes(attribute.Int("http.response.status_code", hresp.StatusCode))
		return nil, nil, ce
	}

	if idle == nil {
		idle = watchIdle(idleTimeout, cancel)
		defer idle.stop()
	}
	body := &idleBody{r: hresp.Body, w: idle}
	asm := newAssembler(route, emit)
	asm.seal = func(kind, data string) string { return s.sealOpaque(route.Canonical(), auth.Owner(ctx), kind, data) }
	if emit != nil {
		asm.rateLimits = parseRateLimits(hresp.Header, time.Now())
		dec := cd.NewDecoder(body)
		var ev codec.Event
		for {
			ev.Reset()
			err := dec.Next(&ev)
			if errors.Is(err, io.EOF) {
				break
			}
			if err == nil {
				seen := asm.Visible()
				err = asm.handle(&ev)
				if !seen && asm.Visible() {
					recordFirstToken(ctx, route, sent)
				}
			}
			if err != nil {
				err = idle.explain(err)
				if asm.Visible() {
					return nil, asm.partial(), err
				}
				return nil, nil, err
			}
		}
	} else if err := cd.DecodeResponse(body, asm.handle); err != nil {
		return nil, nil, idle.explain(err)
	}
	asm.warnings = warnings
	resp, err := asm.complete()
	if err != nil {
		if asm.Visible() {
			return nil, asm.partial(), err
		}
		return nil, nil, err
	}
	if routed != req && routed.GetResponseFormat().GetType() != req.GetResponseFormat().GetType() {
		// The schema went as a prompt: hold the reply to it here.
		if err := checkSchemaReply(req.GetResponseFormat(), resp); err != nil {
			if emit == nil {
				return nil, nil, err
			}
			// Streamed text cannot be taken back: say so instead.
			resp.Warnings = append(resp.Warnings, err.Error())
		}
	}
	return resp, nil, nil
}

// checkSchemaReply validates a reply against the response format's schema.
func checkSchemaReply(rf *llmv1.ResponseFormat, resp *llmv1.Response) error {
	sch, err := compileSchema(rf.GetSchema())
	if err != nil {
		return err // validated with the request; unreachable
	}
	v, err := jsonschema.Decode([]byte(jsonText(resp)))
	if err == nil {
		err = sch.Validate(v, "reply")
	}
	if err != nil {
		return &codec.Error{Kind: llmv1.ErrorKind_ERROR_KIND_RESPONSE_DECODE,
			Message: fmt.Sprintf("the reply does not match schema %s (given as instructions, the model has no native structured output): %v", rf.GetName(), err)}
	}
	return nil
}

// kindForStatus classifies an HTTP status the codec did not.
func kindForStatus(code int) llmv1.ErrorKind {
	switch {
	case code == http.StatusUnauthorized:
		return llmv1.ErrorKind_ERROR_KIND_AUTHENTICATION
	case code == http.StatusForbidden:
		return llmv1.ErrorKind_ERROR_KIND_PERMISSION
	case code == http.StatusNotFound:
		return llmv1.ErrorKind_ERROR_KIND_NOT_FOUND
	case code == http.StatusRequestTimeout, code == http.StatusGatewayTimeout:
		return llmv1.ErrorKind_ERROR_KIND_TIMEOUT
	case code == http.StatusTooManyRequests:
		return llmv1.ErrorKind_ERROR_KIND_RATE_LIMIT
	case code == http.StatusServiceUnavailable, code == 529:
		return llmv1.ErrorKind_ERROR_KIND_OVERLOADED
	case code >= 500:
		return llmv1.ErrorKind_ERROR_KIND_SERVER
	}
	return llmv1.ErrorKind_ERROR_KIND_INVALID_REQUEST
}

// parseRetryAfter reads Retry-After as seconds or an HTTP date.
func parseRetryAfter(v string, now time.Time) time.Duration {
	if v == "" {
		return 0
	}
	if secs, err := strconv.ParseFloat(v, 64); err == nil && secs > 0 {
		return time.Duration(secs * float64(time.Second))
	}
	if t, err := http.ParseTime(v); err == nil && t.After(now) {
		return t.Sub(now)
	}
	return 0
}

func randomID() string { return strings.ToLower(cryptorand.Text()) }

// idleWatch cuts an upstream body that stalls: when no byte has arrived
// for timeout, it cancels the attempt's context, which closes the
// connection and fails the pending Read. A Read only stamps the time (one
// atomic store, no timer reset per chunk); the timer re-arms itself for
// what is left of the window.
type idleWatch struct {
	timeout time.Duration
	start   time.Time    // monotonic base for last
	last    atomic.Int64 // time since start of the last byte, in ns
	fired   atomic.Bool
	cancel  context.CancelFunc

	mu      sync.Mutex // timer and stopped, touched once per window
	timer   *time.Timer
	stopped bool
}

func watchIdle(timeout time.Duration, cancel context.CancelFunc) *idleWatch {
	w := &idleWatch{timeout: timeout, start: time.Now(), cancel: cancel}
	w.mu.Lock()
	defer w.mu.Unlock()
	w.timer = time.AfterFunc(timeout, w.check)
	return w
}

func (w *idleWatch) touch() { w.last.Store(int64(time.Since(w.start))) }

func (w *idleWatch) check() {
	w.mu.Lock()
	defer w.mu.Unlock()
	if w.stopped {
		return
	}
	quiet := time.Since(w.start) - time.Duration(w.last.Load())
	if quiet < w.timeout {
		w.timer.Reset(w.timeout - quiet)
		return
	}
	w.fired.Store(true)
	w.cancel()
}

func (w *idleWatch) stop() {
	w.mu.Lock()
	defer w.mu.Unlock()
	w.stopped = true
	w.timer.Stop()
}

// explain replaces the read error a stall caused with a TIMEOUT error.
func (w *idleWatch) explain(err error) error {
	if !w.fired.Load() {
		return err
	}
	return &codec.Error{Kind: llmv1.ErrorKind_ERROR_KIND_TIMEOUT, Message: fmt.Sprintf("upstream sent nothing for %s", w.timeout)}
}

// idleBody stamps the idle watch on every Read that returns bytes.
type idleBody struct {
	r io.Reader
	w *idleWatch
}

func (b *idleBody) Read(p []byte) (int, error) {
	n, err := b.r.Read(p)
	if n > 0 {
		b.w.touch()
	}
	return n, err
}
