package server

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"mime"
	"net"
	"net/http"
	"net/url"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"sync"

	"github.com/grpc-ecosystem/grpc-gateway/v2/runtime"
	"google.golang.org/genproto/googleapis/rpc/errdetails"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/encoding/protojson"

	"github.com/fabro-sh/fabro-go/gen/openapi"
	"github.com/fabro-sh/fabro-go/platform/grpcerr"
)

// httpErrorDomain is the google.rpc.ErrorInfo domain of the REST port's own
// refusals (before any handler runs).
const httpErrorDomain = "http.fabro.dev"

// restGuard refuses cross-site use of the REST port before any handler runs:
// a Host that is not ours (DNS rebinding) gets 421, an Origin that is neither
// this origin nor a configured one 403, a body that is not application/json
// 415, and a body over the message limit 413 without being read.
type restGuard struct {
	next    http.Handler
	hosts   map[string]bool // allowed host names, lower case, without port
	origins map[string]bool // allowed CORS origins
	max     int64
	// Routes of the methods with a RequestLimiter bound (limits.go): by
	// operationId, their largest JSON body.
	routes routes
	limits map[string]int64
}

func newRESTGuard(addr net.Addr, cfg Config, next http.Handler) (*restGuard, error) {
	g := &restGuard{next: next, max: int64(cfg.MaxMsgBytes), hosts: map[string]bool{
		"localhost": true, "127.0.0.1": true, "::1": true,
	}, origins: map[string]bool{}}
	if ta, ok := addr.(*net.TCPAddr); ok && ta.IP != nil && !ta.IP.IsUnspecified() {
		g.hosts[ta.IP.String()] = true
	}
	if h, _, err := net.SplitHostPort(cfg.HTTPAddr); err == nil && h != "" {
		g.hosts[strings.ToLower(h)] = true
	}
	for _, h := range cfg.HTTPAllowedHosts {
		g.hosts[strings.ToLower(strings.Trim(h, "[]"))] = true
	}
	for _, o := range cfg.HTTPCORSOrigins {
		u, err := url.Parse(o)
		if err != nil || u.Scheme == "" || u.Host == "" || (u.Path != "" && u.Path != "/") {
			return nil, fmt.Errorf("server: CORS origin %q: want scheme://host[:port]", o)
		}
		g.origins[u.Scheme+"://"+strings.ToLower(u.Host)] = true
	}
	return g, nil
}

func hostName(hostport string) string {
	h, _, err := net.SplitHostPort(hostport)
	if err != nil {
		h = hostport
	}
	return strings.ToLower(strings.Trim(h, "[]"))
}

func (g *restGuard) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	if !g.hosts[hostName(r.Host)] {
		restError(w, http.StatusMisdirectedRequest, codes.PermissionDenied, "MISDIRECTED_HOST",
			"this server does not answer to that Host; add it with -http-allowed-hosts")
		return
	}
	if origin := r.Header.Get("Origin"); origin != "" {
		allowedCORS := g.origins[strings.ToLower(origin)]
		if !allowedCORS && !sameOrigin(origin, r) {
			restError(w, http.StatusForbidden, codes.PermissionDenied, "ORIGIN_NOT_ALLOWED",
				"cross-origin requests are refused; allow an origin with -http-cors-origins")
			return
		}
		if allowedCORS {
			h := w.Header()
			h.Set("Access-Control-Allow-Origin", origin)
			h.Add("Vary", "Origin")
			if r.Method == http.MethodOptions && r.Header.Get("Access-Control-Request-Method") != "" {
				h.Set("Access-Control-Allow-Methods", "GET, POST, PUT, PATCH, DELETE")
				h.Set("Access-Control-Allow-Headers", "Authorization, Content-Type")
				h.Set("Access-Control-Max-Age", "600")
				w.WriteHeader(http.StatusNoContent)
				return
			}
		}
	}
	hasBody := r.ContentLength > 0 || r.ContentLength == -1 && len(r.TransferEncoding) > 0
	switch r.Method {
	case http.MethodPost, http.MethodPut, http.MethodPatch:
		hasBody = true // an empty text/plain POST is still refused
	}
	if hasBody {
		mt, _, err := mime.ParseMediaType(r.Header.Get("Content-Type"))
		if err != nil || mt != "application/json" {
			restError(w, http.StatusUnsupportedMediaType, codes.InvalidArgument, "UNSUPPORTED_MEDIA_TYPE",
				"request bodies must be application/json")
			return
		}
		limit := g.limit(r)
		if r.ContentLength > limit {
			g.tooLarge(w, limit)
			return
		}
		body := http.MaxBytesReader(w, r.Body, limit)
		if r.ContentLength < 0 {
			// Unknown length: read up to the limit here, so that an
			// oversized body is refused with 413 and never held whole.
			b, err := io.ReadAll(body)
			if err != nil {
				if _, ok := errors.AsType[*http.MaxBytesError](err); ok {
					g.tooLarge(w, limit)
					return
				}
				restError(w, http.StatusBadRequest, codes.InvalidArgument, "BAD_BODY", "could not read the request body")
				return
			}
			r.ContentLength = int64(len(b))
			body = io.NopCloser(bytes.NewReader(b))
		}
		r.Body = body
	}
	g.next.ServeHTTP(w, r)
}

// limit is the largest body r's route takes: its method's own bound, or
// the server's message limit.
func (g *restGuard) limit(r *http.Request) int64 {
	limit := g.max
	if len(g.limits) > 0 {
		for _, op := range g.routes.operations(r.Method, r.URL.Path) {
			if l, ok := g.limits[op]; ok && l < limit {
				limit = l
			}
		}
	}
	return limit
}

func (g *restGuard) tooLarge(w http.ResponseWriter, limit int64) {
	why := " (-max-msg-bytes)"
	if limit < g.max {
		why = " (this route's limit)"
	}
	restError(w, http.StatusRequestEntityTooLarge, codes.ResourceExhausted, "BODY_TOO_LARGE",
		"request body larger than "+strconv.FormatInt(limit, 10)+" bytes"+why)
}

// sameOrigin reports whether origin is the origin the request was sent to.
func sameOrigin(origin string, r *http.Request) bool {
	u, err := url.Parse(origin)
	return err == nil && strings.EqualFold(u.Host, r.Host) && (u.Scheme == "http" || u.Scheme == "https")
}

// restError writes a google.rpc.Status JSON body, as the gateway does for
// gRPC errors.
func restError(w http.ResponseWriter, httpCode int, code codes.Code, reason, msg string) {
	st := status.New(code, msg)
	if d, err := st.WithDetails(&errdetails.ErrorInfo{Domain: httpErrorDomain, Reason: reason}); err == nil {
		st = d
	}
	b, _ := protojson.Marshal(st.Proto())
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(httpCode)
	_, _ = w.Write(b)
}

// protojson's decode errors that name a field or an enum value.
var (
	unknownFieldRE = regexp.MustCompile(`unknown field "([^"]+)"`)
	badEnumRE      = regexp.MustCompile(`invalid value for enum (?:field )?([A-Za-z0-9_.]+): (".*?"|\S+)`)
)

// namedFieldErrors is the gateway's error handler: a request body with an
// unknown field or enum name gets 400 whose google.rpc.Status carries a
// BadRequest naming the field, every body it cannot decode ErrorInfo
// MALFORMED_REQUEST, and any other status without an ErrorInfo (the
// gateway's own, such as a bad path parameter) gets one, so every REST
// error has the same shape.
func namedFieldErrors(ctx context.Context, mux *runtime.ServeMux, m runtime.Marshaler, w http.ResponseWriter, r *http.Request, err error) {
	hs, custom := errors.AsType[*runtime.HTTPStatusError](err)
	if custom {
		err = hs.Err
	}
	st := status.Convert(err)
	if st.Code() == codes.InvalidArgument && len(st.Details()) == 0 {
		var field, desc string
		if mm := unknownFieldRE.FindStringSubmatch(st.Message()); mm != nil {
			field, desc = mm[1], fmt.Sprintf("unknown field %q", mm[1])
		} else if mm := badEnumRE.FindStringSubmatch(st.Message()); mm != nil {
			field, desc = mm[1], fmt.Sprintf("unknown enum value %s for field %q", mm[2], mm[1])
		}
		// The gateway's own decode failures carry no details: they are
		// malformed requests, with the field named when protojson names it.
		if field != "" {
			st = status.Convert(Domain.New(codes.InvalidArgument, grpcerr.ReasonMalformedRequest, desc, grpcerr.Meta("field", field), grpcerr.Field(field, desc)))
		} else {
			st = status.Convert(Domain.New(codes.InvalidArgument, grpcerr.ReasonMalformedRequest, "the request is not valid: "+st.Message()))
		}
	}
	err = withErrorInfo(st).Err()
	if custom {
		err = &runtime.HTTPStatusError{HTTPStatus: hs.HTTPStatus, Err: err}
	}
	runtime.DefaultHTTPErrorHandler(ctx, mux, m, w, r, err)
}

// withErrorInfo adds an ErrorInfo of the REST port's domain, whose reason
// is the code's name (INVALID_ARGUMENT), to a status that has none.
func withErrorInfo(st *status.Status) *status.Status {
	for _, d := range st.Details() {
		if _, ok := d.(*errdetails.ErrorInfo); ok {
			return st
		}
	}
	if d, err := st.WithDetails(&errdetails.ErrorInfo{Domain: httpErrorDomain, Reason: grpcerr.CodeReason(st.Code())}); err == nil {
		return d
	}
	return st
}

// routes knows, for every REST route of the OpenAPI document, which
// methods its path template answers: a wrong method gets 405 with the
// Allow header these give.
type routes []route

type route struct {
	re      *regexp.Regexp
	methods []string
	ops     map[string]string // method: operationId ("VaultService_PutSecret")
}

// newRoutes reads the path templates of an OpenAPI v2 document: a
// "{field}" segment matches one non-empty path segment (with a ":verb"
// suffix when the template has one), as in grpc-gateway.
func newRoutes(doc []byte) (routes, error) {
	var d struct {
		Paths map[string]map[string]struct {
			OperationID string `json:"operationId"`
		} `json:"paths"`
	}
	if err := json.Unmarshal(doc, &d); err != nil {
		return nil, fmt.Errorf("server: read the OpenAPI document: %w", err)
	}
	var rs routes
	for tmpl, ops := range d.Paths {
		var re strings.Builder
		re.WriteString("^")
		for i, part := range paramRE.Split(tmpl, -1) {
			if i > 0 {
				re.WriteString("[^/]+")
			}
			re.WriteString(regexp.QuoteMeta(part))
		}
		re.WriteString("$")
		r := route{re: regexp.MustCompile(re.String()), ops: map[string]string{}}
		for m, op := range ops {
			r.methods = append(r.methods, strings.ToUpper(m))
			r.ops[strings.ToUpper(m)] = op.OperationID
		}
		rs = append(rs, r)
	}
	return rs, nil
}

var paramRE = regexp.MustCompile(`\{[^}]*\}`)

// docRoutes are the routes of the embedded document, read once.
var docRoutes = sync.OnceValues(func() (routes, error) { return newRoutes(openapi.Document) })

// operations are the operationIds of the routes that answer method on
// path.
func (rs routes) operations(method, path string) []string {
	var ops []string
	for _, r := range rs {
		if op, ok := r.ops[method]; ok && r.re.MatchString(path) {
			ops = append(ops, op)
		}
	}
	return ops
}

// allow is the sorted set of methods some route answers for path.
func (rs routes) allow(path string) []string {
	var ms []string
	for _, r := range rs {
		if r.re.MatchString(path) {
			ms = append(ms, r.methods...)
		}
	}
	slices.Sort(ms)
	return slices.Compact(ms)
}

// routingErrors is the gateway's routing error handler: every answer is a
// google.rpc.Status with an ErrorInfo, like every other REST error; a
// method the path does not take gets 405 with Allow (grpc-gateway's
// default is 501), an unknown path 404.
func (rs routes) routingErrors(_ context.Context, _ *runtime.ServeMux, _ runtime.Marshaler, w http.ResponseWriter, r *http.Request, httpStatus int) {
	switch httpStatus {
	case http.StatusMethodNotAllowed:
		methodNotAllowed(w, r, rs.allow(r.URL.Path)...)
	case http.StatusNotFound:
		restError(w, http.StatusNotFound, codes.NotFound, "ROUTE_NOT_FOUND",
			"no route "+r.URL.Path+": see GET /openapi.json for the routes")
	default:
		restError(w, httpStatus, codes.InvalidArgument, "BAD_REQUEST", http.StatusText(httpStatus))
	}
}

func methodNotAllowed(w http.ResponseWriter, r *http.Request, allow ...string) {
	w.Header().Set("Allow", strings.Join(allow, ", "))
	restError(w, http.StatusMethodNotAllowed, codes.Unimplemented, "METHOD_NOT_ALLOWED",
		r.Method+" is not a method of "+r.URL.Path+"; allowed: "+strings.Join(allow, ", "))
}

// only serves h to the given methods (GET also admits HEAD) and answers
// any other with 405 in the REST error shape. The REST port's own routes
// (/healthz, /openapi.json, /metrics ...) are registered through it
// without a method in their pattern: with one, ServeMux would hand a
// wrong method to the gateway's "/" and answer 404.
func only(h http.Handler, methods ...string) http.Handler {
	if slices.Contains(methods, http.MethodGet) && !slices.Contains(methods, http.MethodHead) {
		methods = append(methods, http.MethodHead)
	}
	slices.Sort(methods)
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if !slices.Contains(methods, r.Method) {
			methodNotAllowed(w, r, methods...)
			return
		}
		h.ServeHTTP(w, r)
	})
}

// ndjsonMarshaler is the gateway's marshaler, which labels a streamed
// response application/x-ndjson: one JSON object per line, each
// {"result": ...} or, last, {"error": google.rpc.Status}.
type ndjsonMarshaler struct {
	*runtime.HTTPBodyMarshaler
}

func (ndjsonMarshaler) StreamContentType(any) string { return "application/x-ndjson" }

// bareStreamErrors gives a streaming route that fails before its first
// message the same answer as any other error: the code's HTTP status and
// a bare google.rpc.Status. grpc-gateway writes that error as a stream
// line, {"error": <status>}, though no stream was ever started. An error
// status is held back with its body until the handler returns, then
// unwrapped when it is such a line; a 2xx answer passes straight through
// (streams are flushed as they go).
func bareStreamErrors(next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		eb := &errorBody{ResponseWriter: w}
		next.ServeHTTP(eb, r)
		eb.finish()
	})
}

type errorBody struct {
	http.ResponseWriter
	started bool // a header or body went through
	code    int  // an error status held back, with buf
	buf     bytes.Buffer
}

func (e *errorBody) WriteHeader(code int) {
	if !e.started && e.code == 0 && code >= 400 {
		e.code = code
		return
	}
	e.started = true
	e.ResponseWriter.WriteHeader(code)
}

func (e *errorBody) Write(b []byte) (int, error) {
	if e.code != 0 {
		return e.buf.Write(b)
	}
	e.started = true
	return e.ResponseWriter.Write(b)
}

func (e *errorBody) Flush() {
	if e.code == 0 {
		e.started = true
		_ = http.NewResponseController(e.ResponseWriter).Flush()
	}
}

func (e *errorBody) Unwrap() http.ResponseWriter { return e.ResponseWriter }

func (e *errorBody) finish() {
	if e.code == 0 {
		return
	}
	body := e.buf.Bytes()
	var line map[string]json.RawMessage
	if json.Unmarshal(body, &line) == nil && len(line) == 1 && len(line["error"]) > 0 {
		body = line["error"]
		e.Header().Del("Transfer-Encoding")
	}
	e.ResponseWriter.WriteHeader(e.code)
	_, _ = e.ResponseWriter.Write(body)
}
