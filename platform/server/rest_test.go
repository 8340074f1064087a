package server

import (
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
	"google.golang.org/genproto/googleapis/rpc/errdetails"
	"google.golang.org/genproto/googleapis/rpc/status"
	"google.golang.org/grpc/codes"
	grpcstatus "google.golang.org/grpc/status"
	"google.golang.org/protobuf/encoding/protojson"
	"google.golang.org/protobuf/testing/protocmp"

	"github.com/fabro-sh/fabro-go/platform/auth"
	"github.com/fabro-sh/fabro-go/platform/auth/authtest"
)

// TestRESTErrorShape: every error the REST port gives, whoever gives it
// (the router, the guard, the authentication, the gateway's decoding, a
// handler), is a google.rpc.Status as JSON with an ErrorInfo; a wrong
// method is 405 with Allow, an unknown path 404.
func TestRESTErrorShape(t *testing.T) {
	fx := authtest.New(t)
	admin, user := "Bearer "+fx.Token("root", auth.RoleAdmin), "Bearer "+fx.Token("ann", auth.RoleUser)
	srv, _, _, _ := startTraced(t, Config{Auth: fx.Store, Pprof: true})
	base := "http://" + srv.HTTPAddr()
	tests := []struct {
		name, method, path, auth, body string
		wantStatus                     int
		wantAllow                      string
		wantCode                       int32 // google.rpc.Code
		wantDomain, wantReason         string
	}{
		{name: "unknown path", method: "GET", path: "/v1/nope", auth: admin,
			wantStatus: 404, wantCode: 5, wantDomain: httpErrorDomain, wantReason: "ROUTE_NOT_FOUND"},
		{name: "unknown path without a token", method: "GET", path: "/nope",
			wantStatus: 404, wantCode: 5, wantDomain: httpErrorDomain, wantReason: "ROUTE_NOT_FOUND"},
		{name: "wrong method on a collection", method: "DELETE", path: "/v1/secrets", auth: admin,
			wantStatus: 405, wantAllow: "GET", wantCode: 12, wantDomain: httpErrorDomain, wantReason: "METHOD_NOT_ALLOWED"},
		{name: "wrong method on a resource", method: "POST", path: "/v1/secrets/OK", auth: admin, body: "{}",
			wantStatus: 405, wantAllow: "DELETE, GET, PUT", wantCode: 12, wantDomain: httpErrorDomain, wantReason: "METHOD_NOT_ALLOWED"},
		{name: "wrong method on healthz", method: "POST", path: "/healthz", body: "{}",
			wantStatus: 405, wantAllow: "GET, HEAD", wantCode: 12, wantDomain: httpErrorDomain, wantReason: "METHOD_NOT_ALLOWED"},
		{name: "wrong method on openapi.json", method: "DELETE", path: "/openapi.json", auth: admin,
			wantStatus: 405, wantAllow: "GET, HEAD", wantCode: 12, wantDomain: httpErrorDomain, wantReason: "METHOD_NOT_ALLOWED"},
		{name: "wrong method on metrics", method: "PUT", path: "/metrics", auth: admin, body: "{}",
			wantStatus: 405, wantAllow: "GET, HEAD", wantCode: 12, wantDomain: httpErrorDomain, wantReason: "METHOD_NOT_ALLOWED"},
		{name: "openapi.json without a token", method: "GET", path: "/openapi.json",
			wantStatus: 401, wantCode: 16, wantDomain: httpErrorDomain, wantReason: "UNAUTHENTICATED"},
		{name: "metrics without a token", method: "GET", path: "/metrics",
			wantStatus: 401, wantCode: 16, wantDomain: httpErrorDomain, wantReason: "UNAUTHENTICATED"},
		{name: "pprof as a user", method: "GET", path: "/debug/pprof/", auth: user,
			wantStatus: 403, wantCode: 7, wantDomain: httpErrorDomain, wantReason: "ADMIN_ONLY"},
		{name: "body that is not JSON", method: "PUT", path: "/v1/secrets/OK", auth: admin, body: "{",
			wantStatus: 400, wantCode: 3, wantDomain: string(Domain), wantReason: "MALFORMED_REQUEST"},
		{name: "body that is not application/json", method: "PUT", path: "/v1/secrets/OK", auth: admin, body: "-",
			wantStatus: 415, wantCode: 3, wantDomain: httpErrorDomain, wantReason: "UNSUPPORTED_MEDIA_TYPE"},
		{name: "handler's own error", method: "GET", path: "/v1/secrets/MISSING", auth: admin,
			wantStatus: 404, wantCode: 5, wantDomain: "vault.fabro.dev", wantReason: "SECRET_NOT_FOUND"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			req, err := http.NewRequestWithContext(t.Context(), tt.method, base+tt.path, strings.NewReader(tt.body))
			if err != nil {
				t.Fatal(err)
			}
			if tt.body != "" {
				ct := "application/json"
				if tt.body == "-" {
					ct = "text/plain"
				}
				req.Header.Set("Content-Type", ct)
			}
			if tt.auth != "" {
				req.Header.Set("Authorization", tt.auth)
			}
			resp, err := http.DefaultClient.Do(req)
			if err != nil {
				t.Fatal(err)
			}
			defer resp.Body.Close()
			body, err := io.ReadAll(resp.Body)
			if err != nil {
				t.Fatal(err)
			}
			if resp.StatusCode != tt.wantStatus {
				t.Fatalf("status = %d, want %d; body %s", resp.StatusCode, tt.wantStatus, body)
			}
			if got := resp.Header.Get("Allow"); got != tt.wantAllow {
				t.Errorf("Allow = %q, want %q", got, tt.wantAllow)
			}
			if ct := resp.Header.Get("Content-Type"); ct != "application/json" {
				t.Errorf("Content-Type = %q, want application/json", ct)
			}
			var st status.Status
			if err := protojson.Unmarshal(body, &st); err != nil {
				t.Fatalf("body is not a google.rpc.Status: %v\n%s", err, body)
			}
			if st.GetCode() != tt.wantCode || st.GetMessage() == "" {
				t.Errorf("code %d message %q, want code %d and a message", st.GetCode(), st.GetMessage(), tt.wantCode)
			}
			var infos [][2]string
			for _, d := range st.GetDetails() {
				var info errdetails.ErrorInfo
				if d.UnmarshalTo(&info) == nil {
					infos = append(infos, [2]string{info.GetDomain(), info.GetReason()})
				}
			}
			if diff := cmp.Diff([][2]string{{tt.wantDomain, tt.wantReason}}, infos); diff != "" {
				t.Errorf("ErrorInfo (-want +got):\n%s", diff)
			}
		})
	}
}

func TestRoutesAllow(t *testing.T) {
	doc := `{"paths": {
		"/v1/sessions": {"get": {}, "post": {}},
		"/v1/sessions/{session_id}": {"get": {}, "delete": {}},
		"/v1/sessions/{session_id}:prompt": {"post": {}},
		"/v1/models:resolve": {"get": {}}
	}}`
	rs, err := newRoutes([]byte(doc))
	if err != nil {
		t.Fatal(err)
	}
	for _, tt := range []struct {
		path string
		want []string
	}{
		{"/v1/sessions", []string{"GET", "POST"}},
		{"/v1/sessions/s1", []string{"DELETE", "GET"}},
		// A verb route; the id route matches too, as in grpc-gateway (a
		// path parameter may hold ':').
		{"/v1/sessions/s1:prompt", []string{"DELETE", "GET", "POST"}},
		{"/v1/models:resolve", []string{"GET"}},
		{"/v1/models", nil},
		{"/v1/sessions/", nil},
		{"/v1/sessions/a/b", nil},
	} {
		if diff := cmp.Diff(tt.want, rs.allow(tt.path)); diff != "" {
			t.Errorf("allow(%s) (-want +got):\n%s", tt.path, diff)
		}
	}
}

func TestWithErrorInfo(t *testing.T) {
	info := &errdetails.ErrorInfo{Domain: "vault.fabro.dev", Reason: "SECRET_NOT_FOUND"}
	own, err := grpcstatus.New(codes.NotFound, "no such secret").WithDetails(info)
	if err != nil {
		t.Fatal(err)
	}
	for _, tt := range []struct {
		name string
		in   *grpcstatus.Status
		want *errdetails.ErrorInfo
	}{
		{"its own is kept", own, info},
		{"a bare status gets the code's name", grpcstatus.New(codes.DeadlineExceeded, "slow"),
			&errdetails.ErrorInfo{Domain: httpErrorDomain, Reason: "DEADLINE_EXCEEDED"}},
		{"an unknown error too", grpcstatus.New(codes.Unknown, "?"),
			&errdetails.ErrorInfo{Domain: httpErrorDomain, Reason: "UNKNOWN"}},
	} {
		t.Run(tt.name, func(t *testing.T) {
			got := withErrorInfo(tt.in)
			var infos []*errdetails.ErrorInfo
			for _, d := range got.Details() {
				if i, ok := d.(*errdetails.ErrorInfo); ok {
					infos = append(infos, i)
				}
			}
			if diff := cmp.Diff([]*errdetails.ErrorInfo{tt.want}, infos, protocmp.Transform()); diff != "" {
				t.Errorf("ErrorInfo (-want +got):\n%s", diff)
			}
			if got.Code() != tt.in.Code() || got.Message() != tt.in.Message() {
				t.Errorf("status %v, want %v with an ErrorInfo", got, tt.in)
			}
		})
	}
}

func TestBareStreamErrors(t *testing.T) {
	const st = `{"code":5,"message":"unknown model","details":[]}`
	for _, tt := range []struct {
		name     string
		handler  func(w http.ResponseWriter)
		wantCode int
		wantBody string
	}{
		{"a stream failing before its first message", func(w http.ResponseWriter) {
			w.Header().Set("Transfer-Encoding", "chunked")
			w.WriteHeader(http.StatusNotFound)
			io.WriteString(w, `{"error":`+st+`}`)
			io.WriteString(w, "\n")
		}, http.StatusNotFound, st},
		{"an ordinary error", func(w http.ResponseWriter) {
			w.WriteHeader(http.StatusNotFound)
			io.WriteString(w, st)
		}, http.StatusNotFound, st},
		{"a stream failing after a message keeps its line", func(w http.ResponseWriter) {
			io.WriteString(w, `{"result":{}}`+"\n")
			http.NewResponseController(w).Flush()
			io.WriteString(w, `{"error":`+st+`}`+"\n")
		}, http.StatusOK, `{"result":{}}` + "\n" + `{"error":` + st + `}` + "\n"},
	} {
		t.Run(tt.name, func(t *testing.T) {
			rec := httptest.NewRecorder()
			bareStreamErrors(http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) { tt.handler(w) })).
				ServeHTTP(rec, httptest.NewRequest(http.MethodPost, "/v1/llm:stream", nil))
			if rec.Code != tt.wantCode || rec.Body.String() != tt.wantBody {
				t.Errorf("got %d %q, want %d %q", rec.Code, rec.Body.String(), tt.wantCode, tt.wantBody)
			}
		})
	}
}
