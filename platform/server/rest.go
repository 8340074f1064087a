package server

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"mime"
	"net"
	"net/http"
	"net/url"
	"regexp"
	"strconv"
	"strings"

	"github.com/grpc-ecosystem/grpc-gateway/v2/runtime"
	"google.golang.org/genproto/googleapis/rpc/errdetails"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/encoding/protojson"

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
		if r.ContentLength > g.max {
			g.tooLarge(w)
			return
		}
		body := http.MaxBytesReader(w, r.Body, g.max)
		if r.ContentLength < 0 {
			// Unknown length: read up to the limit here, so that an
			// oversized body is refused with 413 and never held whole.
			b, err := io.ReadAll(body)
			if err != nil {
				if _, ok := errors.AsType[*http.MaxBytesError](err); ok {
					g.tooLarge(w)
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

func (g *restGuard) tooLarge(w http.ResponseWriter) {
	restError(w, http.StatusRequestEntityTooLarge, codes.ResourceExhausted, "BODY_TOO_LARGE",
		"request body larger than "+strconv.FormatInt(g.max, 10)+" bytes (-max-msg-bytes)")
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
// BadRequest naming the field, and every body it cannot decode ErrorInfo
// MALFORMED_REQUEST; everything else is the default.
func namedFieldErrors(ctx context.Context, mux *runtime.ServeMux, m runtime.Marshaler, w http.ResponseWriter, r *http.Request, err error) {
	st, ok := status.FromError(err)
	if ok && st.Code() == codes.InvalidArgument && len(st.Details()) == 0 {
		var field, desc string
		if mm := unknownFieldRE.FindStringSubmatch(st.Message()); mm != nil {
			field, desc = mm[1], fmt.Sprintf("unknown field %q", mm[1])
		} else if mm := badEnumRE.FindStringSubmatch(st.Message()); mm != nil {
			field, desc = mm[1], fmt.Sprintf("unknown enum value %s for field %q", mm[2], mm[1])
		}
		// The gateway's own decode failures carry no details: they are
		// malformed requests, with the field named when protojson names it.
		if field != "" {
			err = Domain.New(codes.InvalidArgument, grpcerr.ReasonMalformedRequest, desc, grpcerr.Meta("field", field), grpcerr.Field(field, desc))
		} else {
			err = Domain.New(codes.InvalidArgument, grpcerr.ReasonMalformedRequest, "the request is not valid: "+st.Message())
		}
	}
	runtime.DefaultHTTPErrorHandler(ctx, mux, m, w, r, err)
}
