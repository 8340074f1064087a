// Package compat serves the gateway under the HTTP APIs that existing tools
// already speak: OpenAI Chat Completions, OpenAI Responses and Anthropic
// Messages, with their model lists. Each front translates its API's request
// into a fabro.llm.v1 Request, runs it through the gateway (catalog
// resolution, retries, failover, vault credentials, usage and cost), and
// answers in that API's exact wire format, streamed or not. Any catalog
// model is reachable through any front.
//
// Routes, mounted on the REST port beside the gateway's own (whose paths all
// start with /v1/, so these prefixes cannot collide):
//
//	POST /openai/v1/chat/completions    GET /openai/v1/models[/{id}]
//	POST /openai/v1/responses
//	POST /anthropic/v1/messages         GET /anthropic/v1/models[/{id}]
//
// Features a front cannot carry to the gateway (audio input, n > 1,
// logprobs, server-side tools, stored conversations, ...) are refused with
// that API's own 400 naming the feature, never dropped.
package compat

import (
	"context"
	"crypto/rand"
	"encoding/base64"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"net/http"
	"strconv"
	"strings"
	"time"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	llmv1 "github.com/fabro-sh/fabro-go/gen/fabro/llm/v1"
	"github.com/fabro-sh/fabro-go/platform/auth"
	"github.com/fabro-sh/fabro-go/services/llmgateway/internal/envelope"
	"github.com/fabro-sh/fabro-go/services/llmgateway/internal/governance"
)

// Backend is the gateway as the fronts use it, in process.
type Backend interface {
	// Generate runs one request; with emit it streams (see the gateway's
	// Stream: events until a terminal Ended or StreamError, and an error
	// only when nothing was emitted), without emit it returns the Response.
	// Errors carry a gRPC status with a fabro.llm.v1.ErrorDetail.
	Generate(ctx context.Context, req *llmv1.Request, emit func(*llmv1.StreamResponse) error) (*llmv1.Response, error)
	// ListModels lists the catalog's (and discovered) enabled models.
	ListModels(ctx context.Context, req *llmv1.ListModelsRequest) (*llmv1.ListModelsResponse, error)
	// ResolveModel resolves a selector, for capability checks.
	ResolveModel(ctx context.Context, req *llmv1.ResolveModelRequest) (*llmv1.ResolveModelResponse, error)
}

// Authenticator checks the API key a caller presents (a fabro token). It
// returns ctx carrying the caller's principal (auth.WithPrincipal), to
// which the round-trip envelopes handed to the caller are bound. A nil
// Authenticator accepts every caller, as the gateway's own REST routes do
// when the server has no authentication configured.
type Authenticator interface {
	// Authenticate returns ctx with the caller's principal added.
	Authenticate(ctx context.Context, token string) (context.Context, error)
}

// TokenWatcher is an Authenticator that can also end a call whose token is
// revoked while it runs: the context it returns is then cancelled, and a
// stream stops there, as the gRPC streams do.
type TokenWatcher interface {
	WatchToken(ctx context.Context, token string) (context.Context, context.CancelFunc)
}

// tokenKey carries the caller's key from authentication to a streamed
// answer, the only kind that needs watching: a one-shot answer is decided
// before a revocation could matter to it.
type tokenKey struct{}

// stream runs req streamed through emit, its context watched for the
// revocation of the caller's key when the Authenticator can watch.
func (h *Handler) stream(ctx context.Context, req *llmv1.Request, emit func(*llmv1.StreamResponse) error) (*llmv1.Response, error) {
	if tw, ok := h.auth.(TokenWatcher); ok {
		if key, ok := ctx.Value(tokenKey{}).(string); ok {
			var stop context.CancelFunc
			ctx, stop = tw.WatchToken(ctx, key)
			defer stop()
		}
	}
	return h.backend.Generate(ctx, req, emit)
}

// route is one of the handler's routes, served by a copy of the handler
// for its caller.
type route func(h *Handler, w http.ResponseWriter, r *http.Request)

// authenticated runs next with the context Authenticate returned, on a
// copy of h whose envelopes are bound to the caller's principal.
func (h *Handler) authenticated(next route, w http.ResponseWriter, r *http.Request, ctx context.Context, key string) {
	hc := *h
	if p, ok := auth.FromContext(ctx); ok {
		hc.principal = p.String()
	}
	next(&hc, w, r.WithContext(context.WithValue(ctx, tokenKey{}, key)))
}

// Handler serves the compatible APIs.
type Handler struct {
	backend Backend
	auth    Authenticator
	sealer  *envelope.Sealer
	logger  *slog.Logger
	now     func() time.Time
	// principal is the caller's ("user:alice"), set on the per-request
	// copy (authenticated): envelopes are sealed to it and open only for
	// it, so one caller's state cannot be replayed by another.
	principal string
}

// New returns the handler; auth may be nil (see Authenticator). The sealer
// seals the round-trip state handed to clients and opens what they send
// back; every replica a client may reach must share its key.
func New(backend Backend, auth Authenticator, sealer *envelope.Sealer, logger *slog.Logger) *Handler {
	return &Handler{backend: backend, auth: auth, sealer: sealer, logger: logger, now: time.Now}
}

// Prefixes are the path prefixes the handler serves.
var Prefixes = []string{"/openai/", "/anthropic/"}

// Register adds the routes to mux.
func (h *Handler) Register(mux *http.ServeMux) {
	mux.HandleFunc("POST /openai/v1/chat/completions", h.openaiAuth((*Handler).chatCompletions))
	mux.HandleFunc("POST /openai/v1/responses", h.openaiAuth((*Handler).responses))
	mux.HandleFunc("GET /openai/v1/models", h.openaiAuth((*Handler).openaiModels))
	mux.HandleFunc("GET /openai/v1/models/{id...}", h.openaiAuth((*Handler).openaiModel))
	mux.HandleFunc("/openai/", h.openaiAuth(func(_ *Handler, w http.ResponseWriter, r *http.Request) {
		writeOpenAIError(w, http.StatusNotFound, "invalid_request_error", "", "unknown_url",
			"Invalid URL ("+r.Method+" "+r.URL.Path+")")
	}))
	mux.HandleFunc("POST /anthropic/v1/messages", h.anthropicAuth((*Handler).messages))
	mux.HandleFunc("GET /anthropic/v1/models", h.anthropicAuth((*Handler).anthropicModels))
	mux.HandleFunc("GET /anthropic/v1/models/{id...}", h.anthropicAuth((*Handler).anthropicModel))
	mux.HandleFunc("/anthropic/", h.anthropicAuth(func(_ *Handler, w http.ResponseWriter, r *http.Request) {
		writeAnthropicError(w, http.StatusNotFound, "not_found_error", "Not found: "+r.Method+" "+r.URL.Path)
	}))
}

// maxBody bounds a request body: long contexts with inline images.
const maxBody = 64 << 20

// RateUsager is a Backend that reports the caller's rate limits (the
// gateway's governance of its token), for the APIs' rate-limit headers.
type RateUsager interface {
	RateUsage(ctx context.Context) (governance.Usage, bool)
}

// newRequestID is a request id in the APIs' style: "req_" and 24 random
// hex digits.
func newRequestID() string {
	var b [12]byte
	_, _ = rand.Read(b[:])
	return "req_" + hex.EncodeToString(b[:])
}

// rateHeaders sets the API's rate-limit headers from the caller's limits,
// counting the request being made: OpenAI's x-ratelimit-* (reset as a
// duration) or Anthropic's anthropic-ratelimit-* (reset as RFC 3339).
func (h *Handler) rateHeaders(w http.ResponseWriter, ctx context.Context, anthropicStyle bool) {
	ru, ok := h.backend.(RateUsager)
	if !ok {
		return
	}
	u, ok := ru.RateUsage(ctx)
	if !ok {
		return
	}
	hd := w.Header()
	set := func(kind string, limit, remaining int64) {
		if limit <= 0 {
			return
		}
		if anthropicStyle {
			hd.Set("anthropic-ratelimit-"+kind+"-limit", strconv.FormatInt(limit, 10))
			hd.Set("anthropic-ratelimit-"+kind+"-remaining", strconv.FormatInt(remaining, 10))
			hd.Set("anthropic-ratelimit-"+kind+"-reset", u.Reset.UTC().Format(time.RFC3339))
			return
		}
		hd.Set("x-ratelimit-limit-"+kind, strconv.FormatInt(limit, 10))
		hd.Set("x-ratelimit-remaining-"+kind, strconv.FormatInt(remaining, 10))
		hd.Set("x-ratelimit-reset-"+kind, time.Until(u.Reset).Round(time.Second).String())
	}
	set("requests", u.RequestsLimit, max(0, u.RequestsRemaining-1))
	set("tokens", u.TokensLimit, u.TokensRemaining)
}

func (h *Handler) openaiAuth(next route) http.HandlerFunc {
	return func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("x-request-id", newRequestID())
		key, ok := strings.CutPrefix(r.Header.Get("Authorization"), "Bearer ")
		if h.auth != nil {
			if !ok || strings.TrimSpace(key) == "" {
				writeOpenAIError(w, http.StatusUnauthorized, "invalid_request_error", "", "",
					"You didn't provide an API key. You need to provide your API key in an Authorization header using Bearer auth (i.e. Authorization: Bearer YOUR_KEY).")
				return
			}
			ctx, err := h.auth.Authenticate(r.Context(), strings.TrimSpace(key))
			if err != nil {
				writeOpenAIError(w, http.StatusUnauthorized, "invalid_request_error", "", "invalid_api_key",
					"Incorrect API key provided. Use a fabro token as the API key.")
				return
			}
			h.rateHeaders(w, ctx, false)
			h.authenticated(next, w, r, ctx, strings.TrimSpace(key))
			return
		}
		next(h, w, r)
	}
}

func (h *Handler) anthropicAuth(next route) http.HandlerFunc {
	return func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("request-id", newRequestID())
		key := r.Header.Get("X-Api-Key")
		if key == "" { // the SDKs' auth-token mode
			key, _ = strings.CutPrefix(r.Header.Get("Authorization"), "Bearer ")
		}
		key = strings.TrimSpace(key)
		if h.auth != nil {
			if key == "" {
				writeAnthropicError(w, http.StatusUnauthorized, "authentication_error", "x-api-key header is required")
				return
			}
			ctx, err := h.auth.Authenticate(r.Context(), key)
			if err != nil {
				writeAnthropicError(w, http.StatusUnauthorized, "authentication_error", "invalid x-api-key")
				return
			}
			h.rateHeaders(w, ctx, true)
			h.authenticated(next, w, r, ctx, key)
			return
		}
		next(h, w, r)
	}
}

// readJSONObject reads the body as a JSON object, keeping each field raw so
// that a front can refuse fields it does not know.
func readJSONObject(w http.ResponseWriter, r *http.Request) (map[string]json.RawMessage, error) {
	var fields map[string]json.RawMessage
	dec := json.NewDecoder(http.MaxBytesReader(w, r.Body, maxBody))
	if err := dec.Decode(&fields); err != nil {
		var mbe *http.MaxBytesError
		if errors.As(err, &mbe) {
			return nil, errors.New("the request body is larger than 64 MiB")
		}
		return nil, errors.New("the request body is not a JSON object: " + err.Error())
	}
	if fields == nil {
		return nil, errors.New("the request body is not a JSON object")
	}
	return fields, nil
}

// reqError is a request a front refuses: the parameter at fault and why.
type reqError struct {
	param string
	msg   string
	code  string // OpenAI error code, e.g. "unsupported_parameter"
}

func (e *reqError) Error() string { return e.msg }

func badParam(param, format string, args ...any) *reqError {
	return &reqError{param: param, msg: sprintf(format, args...)}
}

func unsupported(param, format string, args ...any) *reqError {
	return &reqError{param: param, msg: sprintf(format, args...), code: "unsupported_parameter"}
}

// decodeField unmarshals one raw field, naming it on failure.
func decodeField(fields map[string]json.RawMessage, name string, v any) error {
	raw, ok := fields[name]
	if !ok || string(raw) == "null" {
		return nil
	}
	if err := json.Unmarshal(raw, v); err != nil {
		return badParam(name, "Invalid type for '%s': %s", name, jsonTypeError(err))
	}
	return nil
}

func jsonTypeError(err error) string {
	var te *json.UnmarshalTypeError
	if errors.As(err, &te) {
		if te.Field != "" {
			return "field '" + te.Field + "' must be " + jsonKind(te.Type.Kind().String()) + ", not " + te.Value
		}
		return "expected " + jsonKind(te.Type.Kind().String()) + ", got " + te.Value
	}
	return err.Error()
}

func jsonKind(k string) string {
	switch k {
	case "string":
		return "a string"
	case "slice", "array":
		return "an array"
	case "struct", "map", "interface":
		return "an object"
	case "bool":
		return "a boolean"
	case "float64", "float32":
		return "a number"
	}
	return "an integer"
}

// errorInfo is a backend error seen from an HTTP API.
type errorInfo struct {
	status     int
	kind       llmv1.ErrorKind
	message    string
	retryAfter time.Duration
}

// backendError reads the status and detail of a gateway error and picks the
// HTTP status the compatible APIs use for it. Upstream credential problems
// are the gateway's, not the caller's: they are not a 401 (which would tell
// the caller its own key is wrong).
func backendError(ctx context.Context, err error) errorInfo {
	st, _ := status.FromError(err)
	if ctx.Err() != nil && st.Code() == codes.Unknown {
		st = status.FromContextError(ctx.Err())
	}
	info := errorInfo{message: st.Message()}
	missing := false
	for _, d := range st.Details() {
		if ed, ok := d.(*llmv1.ErrorDetail); ok {
			info.kind = ed.GetKind()
			if ed.GetRetryAfter() != nil {
				info.retryAfter = ed.GetRetryAfter().AsDuration()
			}
			if len(ed.GetMissingCredentials()) > 0 {
				missing = true
				info.message += " (set " + strings.Join(ed.GetMissingCredentials(), " or ") + ")"
			}
		}
	}
	info.status = statusForKind(info.kind, st.Code())
	if missing {
		// A provider without a credential is a configuration error no
		// retry fixes: a 400 naming what to set, not a 5xx an SDK retries.
		info.status = http.StatusBadRequest
	}
	return info
}

func statusForKind(kind llmv1.ErrorKind, code codes.Code) int {
	switch kind {
	case llmv1.ErrorKind_ERROR_KIND_INVALID_REQUEST, llmv1.ErrorKind_ERROR_KIND_CONTEXT_LENGTH, llmv1.ErrorKind_ERROR_KIND_CONTENT_FILTER:
		return http.StatusBadRequest
	case llmv1.ErrorKind_ERROR_KIND_NOT_FOUND:
		return http.StatusNotFound
	case llmv1.ErrorKind_ERROR_KIND_PERMISSION:
		return http.StatusForbidden
	case llmv1.ErrorKind_ERROR_KIND_RATE_LIMIT:
		return http.StatusTooManyRequests
	case llmv1.ErrorKind_ERROR_KIND_OVERLOADED:
		return http.StatusServiceUnavailable
	case llmv1.ErrorKind_ERROR_KIND_AUTHENTICATION, llmv1.ErrorKind_ERROR_KIND_SERVER,
		llmv1.ErrorKind_ERROR_KIND_NETWORK, llmv1.ErrorKind_ERROR_KIND_STREAM_DECODE:
		return http.StatusBadGateway
	case llmv1.ErrorKind_ERROR_KIND_TIMEOUT:
		return http.StatusGatewayTimeout
	case llmv1.ErrorKind_ERROR_KIND_CANCELLED:
		return 499 // the client went away; nobody reads the body
	}
	switch code {
	case codes.InvalidArgument, codes.FailedPrecondition, codes.OutOfRange:
		return http.StatusBadRequest
	case codes.NotFound:
		return http.StatusNotFound
	case codes.PermissionDenied:
		return http.StatusForbidden
	case codes.Unauthenticated:
		return http.StatusUnauthorized
	case codes.ResourceExhausted:
		return http.StatusTooManyRequests
	case codes.Unavailable:
		return http.StatusServiceUnavailable
	case codes.DeadlineExceeded:
		return http.StatusGatewayTimeout
	case codes.Canceled:
		return 499
	}
	return http.StatusInternalServerError
}

func setRetryAfter(w http.ResponseWriter, d time.Duration) {
	if d > 0 {
		w.Header().Set("Retry-After", strconv.Itoa(int((d+time.Second-1)/time.Second)))
	}
}

func writeJSON(w http.ResponseWriter, status int, v any) {
	b, err := json.Marshal(v)
	if err != nil { // every value here is marshalable: a bug
		http.Error(w, `{"error":{"message":"internal error","type":"server_error"}}`, http.StatusInternalServerError)
		return
	}
	w.Header().Set("Content-Type", "application/json")
	w.Header().Set("Content-Length", strconv.Itoa(len(b)))
	w.WriteHeader(status)
	_, _ = w.Write(b)
}

// sse writes server-sent events, flushing each one. Headers go out with the
// first event, so an error before it can still be a plain JSON reply.
type sse struct {
	w       http.ResponseWriter
	rc      *http.ResponseController
	started bool
	hold    bool // the next event is written without a flush
	buf     []byte
}

// framing are the events that only frame content: they go out with the
// next event that carries some, one write and one flush instead of several
// (the caller can do nothing with a frame alone).
var framing = map[string]bool{
	"message_start": true, "ping": true, "content_block_start": true,
	"response.created": true, "response.in_progress": true, "response.output_item.added": true,
	"response.content_part.added": true, "response.reasoning_summary_part.added": true,
}

func newSSE(w http.ResponseWriter) *sse { return &sse{w: w, rc: http.NewResponseController(w)} }

func (s *sse) start() {
	if s.started {
		return
	}
	s.started = true
	h := s.w.Header()
	h.Set("Content-Type", "text/event-stream; charset=utf-8")
	h.Set("Cache-Control", "no-cache")
	h.Set("X-Accel-Buffering", "no")
	s.w.WriteHeader(http.StatusOK)
}

// event writes one event; name may be empty (OpenAI Chat has none).
func (s *sse) event(name string, v any) error {
	data, err := json.Marshal(v)
	if err != nil {
		return err
	}
	return s.raw(name, data)
}

func (s *sse) raw(name string, data []byte) error {
	s.start()
	b := s.buf[:0]
	if name != "" {
		b = append(b, "event: "...)
		b = append(b, name...)
		b = append(b, '\n')
	}
	b = append(b, "data: "...)
	b = append(b, data...)
	b = append(b, "\n\n"...)
	s.buf = b
	if _, err := s.w.Write(b); err != nil {
		return err
	}
	if s.hold || framing[name] {
		s.hold = false
		return nil // net/http buffers it; the next flush sends it
	}
	return s.rc.Flush()
}

// Round-trip state (reasoning signatures, redacted reasoning, opaque
// provider items) travels through the fronts' opaque fields (Anthropic's
// thinking signature and redacted_thinking data, OpenAI's
// encrypted_content) sealed in an envelope (package envelope) bound to the
// route, provider and model, that made it, whichever front the next turn
// comes in by. What comes back is opened once the request's model is
// resolved: an envelope that does not authenticate, belongs to a route the
// request cannot take, or a bare value (a provider's signature pasted in,
// an old unauthenticated fabro1. envelope) is the API's 400 naming the
// field, and nothing goes upstream.
type roundTrip struct {
	Signature  string `json:"s,omitempty"`
	Redacted   bool   `json:"r,omitempty"`
	OpaqueKind string `json:"k,omitempty"` // set: an OpaquePart
	OpaqueData string `json:"d,omitempty"`
}

// replay is one envelope a request sent back, to open into part.
type replay struct {
	param    string // the field it came in, for the error
	value    string
	text     string // the reasoning text beside it, if any
	redacted bool   // it came as redacted reasoning (Anthropic redacted_thinking)
	part     *llmv1.ContentPart
}

// replays collects a request's envelopes while it is translated.
type replays []replay

// add returns the part an envelope will fill, recording it.
func (rs *replays) add(param, value, text string, redacted bool) *llmv1.ContentPart {
	p := &llmv1.ContentPart{}
	*rs = append(*rs, replay{param: param, value: value, text: text, redacted: redacted, part: p})
	return p
}

// roundTripState seals a response part's replay state for route
// ("provider/model"), "" when it has none.
func (h *Handler) roundTripState(p *llmv1.ContentPart, route string) string {
	var rt roundTrip
	switch x := p.GetPart().(type) {
	case *llmv1.ContentPart_Reasoning:
		r := x.Reasoning
		if r.GetSignature() == "" && !r.GetRedacted() {
			return ""
		}
		rt = roundTrip{Signature: r.GetSignature(), Redacted: r.GetRedacted()}
	case *llmv1.ContentPart_Opaque:
		rt = roundTrip{OpaqueKind: x.Opaque.GetKind(), OpaqueData: x.Opaque.GetData()}
	default:
		return ""
	}
	b, _ := json.Marshal(rt) // strings and a bool: always marshals
	return h.sealer.Seal(route, h.principal, b)
}

// openReplays opens a request's envelopes into their parts, once its model
// resolved to res: each must authenticate and name a route the request
// may take (its model, or one of the model's fallbacks).
func (h *Handler) openReplays(ctx context.Context, req *llmv1.Request, res *llmv1.ResolveModelResponse, rs replays) error {
	if len(rs) == 0 {
		return nil
	}
	routes := map[string]bool{res.GetCanonical(): true}
	if !req.GetDisableFallbacks() {
		fallbacks := req.GetFallbacks()
		if len(fallbacks) == 0 {
			fallbacks = res.GetModel().GetFallbacks()
		}
		for _, sel := range fallbacks {
			if fr, err := h.backend.ResolveModel(ctx, &llmv1.ResolveModelRequest{Selector: sel}); err == nil {
				routes[fr.GetCanonical()] = true
			}
		}
	}
	for _, r := range rs {
		// The claimed route first, for the clearer error; Open then
		// authenticates it.
		if claimed, err := envelope.Route(r.value); err == nil && !routes[claimed] {
			return badParam(r.param, "%s: the round-trip state was made by %s and cannot be replayed to %s", r.param, claimed, res.GetCanonical())
		}
		route, plain, err := h.sealer.Open(r.value, h.principal)
		var rt roundTrip
		if err == nil && json.Unmarshal(plain, &rt) != nil {
			err = envelope.ErrForged // sealed by us, so unreachable short of a bug
		}
		if err != nil {
			return badParam(r.param, "%s: the round-trip state %v", r.param, err)
		}
		provider, _, _ := strings.Cut(route, "/")
		if rt.OpaqueKind != "" {
			r.part.Part = &llmv1.ContentPart_Opaque{Opaque: &llmv1.OpaquePart{Kind: rt.OpaqueKind, Data: rt.OpaqueData}}
			continue
		}
		r.part.Part = &llmv1.ContentPart_Reasoning{Reasoning: &llmv1.ReasoningPart{
			Text: r.text, Signature: rt.Signature, SignatureOrigin: provider, Redacted: rt.Redacted || r.redacted,
		}}
	}
	return nil
}

// resolveRequest resolves the request's model, refuses what it cannot
// take, and opens the envelopes the request sent back for it.
func (h *Handler) resolveRequest(ctx context.Context, req *llmv1.Request, rs replays) error {
	res, err := h.checkCapabilities(ctx, req)
	if err != nil {
		return err
	}
	return h.openReplays(ctx, req, res, rs)
}

// checkCapabilities refuses what the resolved model's catalog entry says it
// cannot take. Models without capabilities (discovered, passthrough) pass.
func (h *Handler) checkCapabilities(ctx context.Context, req *llmv1.Request) (*llmv1.ResolveModelResponse, error) {
	res, err := h.backend.ResolveModel(ctx, &llmv1.ResolveModelRequest{Selector: req.GetModel()})
	if err != nil {
		return nil, err
	}
	caps := res.GetModel().GetCapabilities()
	if caps == nil {
		return res, nil
	}
	if !caps.GetVision() && hasImages(req) {
		return nil, unsupported("messages", "image input is not supported by model %s", res.GetCanonical())
	}
	if !caps.GetTools() && len(req.GetTools()) > 0 {
		return nil, unsupported("tools", "tools are not supported by model %s", res.GetCanonical())
	}
	return res, nil
}

func hasImages(req *llmv1.Request) bool {
	var in func([]*llmv1.ContentPart) bool
	in = func(parts []*llmv1.ContentPart) bool {
		for _, p := range parts {
			if p.GetImage() != nil || in(p.GetToolResult().GetContent()) {
				return true
			}
		}
		return false
	}
	for _, m := range req.GetMessages() {
		if in(m.GetParts()) {
			return true
		}
	}
	return false
}

// toolNames maps tool call ids to names across a conversation: the APIs'
// tool results name only the call, Gemini needs the function name.
type toolNames map[string]string

func (t toolNames) fill(req *llmv1.Request) {
	for _, m := range req.GetMessages() {
		for _, p := range m.GetParts() {
			if tr := p.GetToolResult(); tr != nil && tr.GetName() == "" {
				tr.Name = t[tr.GetToolCallId()]
			}
		}
	}
}

// imageFromURL reads an image URL: a data: URL becomes inline bytes.
func imageFromURL(u, param string) (*llmv1.ImagePart, error) {
	if rest, ok := strings.CutPrefix(u, "data:"); ok {
		meta, data, ok := strings.Cut(rest, ",")
		mt, isB64 := strings.CutSuffix(meta, ";base64")
		if !ok || !isB64 || mt == "" {
			return nil, badParam(param, "Invalid image URL: a data URL must be data:<media type>;base64,<data>")
		}
		b, err := base64.StdEncoding.DecodeString(data)
		if err != nil {
			return nil, badParam(param, "Invalid image URL: the base64 data does not decode")
		}
		return &llmv1.ImagePart{Source: &llmv1.ImagePart_Data{Data: b}, MediaType: mt}, nil
	}
	if !strings.HasPrefix(u, "https://") && !strings.HasPrefix(u, "http://") {
		return nil, badParam(param, "Invalid image URL: expected an http(s) or data URL")
	}
	return &llmv1.ImagePart{Source: &llmv1.ImagePart_Url{Url: u}}, nil
}

// effortFromName maps an OpenAI/Anthropic effort name to the gateway's.
func effortFromName(s string) (llmv1.ReasoningEffort, bool) {
	switch s {
	case "", "none":
		return llmv1.ReasoningEffort_REASONING_EFFORT_UNSPECIFIED, true
	case "minimal", "low":
		return llmv1.ReasoningEffort_REASONING_EFFORT_LOW, true
	case "medium":
		return llmv1.ReasoningEffort_REASONING_EFFORT_MEDIUM, true
	case "high":
		return llmv1.ReasoningEffort_REASONING_EFFORT_HIGH, true
	case "xhigh":
		return llmv1.ReasoningEffort_REASONING_EFFORT_XHIGH, true
	case "max":
		return llmv1.ReasoningEffort_REASONING_EFFORT_MAX, true
	}
	return 0, false
}

func textPart(s string) *llmv1.ContentPart {
	return &llmv1.ContentPart{Part: &llmv1.ContentPart_Text{Text: &llmv1.TextPart{Text: s}}}
}

// responseText joins a response's text parts.
func responseText(resp *llmv1.Response) string {
	var b strings.Builder
	for _, p := range resp.GetParts() {
		b.WriteString(p.GetText().GetText())
	}
	return b.String()
}

func sprintf(format string, args ...any) string { return fmt.Sprintf(format, args...) }
