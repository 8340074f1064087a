package router

import (
	"fmt"
	"net/http"
	"net/http/httputil"
	"net/url"
	"sort"
	"strings"
	"time"

	"google.golang.org/grpc/codes"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/encoding/protojson"

	"github.com/fabro-sh/fabro-go/platform/grpcerr"
)

// HTTPRoute sends the REST requests under some path prefixes to one
// backend. A prefix matches itself and what follows it after "/" or ":"
// (/v1/sessions matches /v1/sessions/s_1:prompt, not /v1/sessionsX).
type HTTPRoute struct {
	Prefixes []string
	Backend  *url.URL // http://host:port
}

// HTTPHandler forwards REST requests by the longest matching prefix, and
// answers GET /healthz itself (200 while every gRPC backend is SERVING,
// else 503). Responses stream through unbuffered (newline-delimited JSON
// of streaming routes). The request keeps its Host, so each backend's own
// Host and Origin checks judge what the caller sent; a path no route
// matches gets 404.
func (r *Router) HTTPHandler(routes []HTTPRoute) (http.Handler, error) {
	type entry struct {
		prefix string
		proxy  *httputil.ReverseProxy
	}
	var entries []entry
	for _, rt := range routes {
		if rt.Backend == nil || rt.Backend.Host == "" || (rt.Backend.Scheme != "http" && rt.Backend.Scheme != "https") {
			return nil, fmt.Errorf("router: REST backend %v: want http://host:port", rt.Backend)
		}
		target := rt.Backend
		p := &httputil.ReverseProxy{
			Rewrite: func(pr *httputil.ProxyRequest) {
				pr.SetURL(target)
				pr.Out.Host = pr.In.Host
				pr.SetXForwarded()
			},
			FlushInterval: -1,
			ErrorHandler: func(w http.ResponseWriter, req *http.Request, err error) {
				r.logger.WarnContext(req.Context(), "REST backend unreachable", "backend", target.Host, "path", req.URL.Path, "error", err)
				restError(w, http.StatusBadGateway, domain.Status(codes.Unavailable, "BACKEND_UNREACHABLE",
					"the service behind this path is unreachable", grpcerr.RetryAfter(time.Second)))
			},
		}
		for _, pre := range rt.Prefixes {
			if !strings.HasPrefix(pre, "/") {
				return nil, fmt.Errorf("router: REST prefix %q must start with /", pre)
			}
			entries = append(entries, entry{strings.TrimSuffix(pre, "/"), p})
		}
	}
	sort.Slice(entries, func(i, j int) bool { return len(entries[i].prefix) > len(entries[j].prefix) })
	return http.HandlerFunc(func(w http.ResponseWriter, req *http.Request) {
		if req.URL.Path == "/healthz" && (req.Method == http.MethodGet || req.Method == http.MethodHead) {
			r.healthz(w, req)
			return
		}
		for _, e := range entries {
			if matches(req.URL.Path, e.prefix) {
				e.proxy.ServeHTTP(w, req)
				return
			}
		}
		restError(w, http.StatusNotFound, domain.Status(codes.NotFound, "NO_ROUTE", "no service serves this path"))
	}), nil
}

func matches(path, prefix string) bool {
	if prefix == "" {
		return true // "/": everything
	}
	if !strings.HasPrefix(path, prefix) {
		return false
	}
	rest := path[len(prefix):]
	return rest == "" || rest[0] == '/' || rest[0] == ':'
}

func (r *Router) healthz(w http.ResponseWriter, req *http.Request) {
	resp, err := r.health.Check(req.Context(), &healthpb.HealthCheckRequest{})
	if err != nil || resp.GetStatus() != healthpb.HealthCheckResponse_SERVING {
		http.Error(w, "not serving", http.StatusServiceUnavailable)
		return
	}
	fmt.Fprintln(w, "ok")
}

// restError writes st as the REST errors of the services are written: a
// google.rpc.Status in JSON, details included.
func restError(w http.ResponseWriter, code int, st *status.Status) {
	body, err := protojson.Marshal(st.Proto())
	if err != nil {
		body = []byte(`{"code":13,"message":"router: cannot encode an error"}`)
	}
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(code)
	_, _ = w.Write(append(body, '\n'))
}
