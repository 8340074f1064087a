package server

import (
	"bufio"
	"context"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"fmt"
	"io"
	"log/slog"
	"math/big"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"google.golang.org/grpc/codes"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/status"

	vaultv1 "github.com/fabro-sh/fabro-go/gen/fabro/vault/v1"
	"github.com/fabro-sh/fabro-go/platform/auth"
	"github.com/fabro-sh/fabro-go/platform/auth/authtest"
	"github.com/fabro-sh/fabro-go/platform/grpcclient"
)

// putCalls counts PutSecret handler runs, so a test can tell that a refused
// REST request never reached one.
var putCalls atomic.Int64

func (f *fakeVault) PutSecret(context.Context, *vaultv1.PutSecretRequest) (*vaultv1.PutSecretResponse, error) {
	putCalls.Add(1)
	return &vaultv1.PutSecretResponse{Secret: &vaultv1.SecretMetadata{Name: "OK", CurrentVersion: 1}}, nil
}

func TestRESTRefusesCrossSite(t *testing.T) {
	const limit = 1 << 16
	h := start(t, Config{HTTPAddr: "127.0.0.1:0", MaxMsgBytes: limit, HTTPAllowedHosts: []string{"fabro.internal"}})
	addr := h.srv.HTTPAddr()
	_, port, _ := net.SplitHostPort(addr)
	big := strings.Repeat("x", 2*limit)
	tests := []struct {
		name        string
		host        string // Host header; default the listen address
		origin      string
		contentType string
		body        string
		chunked     bool
		wantStatus  int
		wantText    string
		wantHandler bool
	}{
		{name: "listen address", contentType: "application/json", body: `{"value":"v"}`, wantStatus: 200, wantHandler: true},
		{name: "localhost", host: "localhost:" + port, contentType: "application/json", body: `{}`, wantStatus: 200, wantHandler: true},
		{name: "configured name", host: "fabro.internal", contentType: "application/json; charset=utf-8", body: `{}`, wantStatus: 200, wantHandler: true},
		{name: "DNS rebinding", host: "evil.example:" + port, contentType: "application/json", body: `{}`, wantStatus: 421, wantText: "MISDIRECTED_HOST"},
		{name: "foreign origin", origin: "http://evil.example", contentType: "application/json", body: `{}`, wantStatus: 403, wantText: "ORIGIN_NOT_ALLOWED"},
		{name: "same origin", origin: "http://" + addr, contentType: "application/json", body: `{}`, wantStatus: 200, wantHandler: true},
		{name: "text/plain", contentType: "text/plain", body: `{"value":"v"}`, wantStatus: 415, wantText: "UNSUPPORTED_MEDIA_TYPE"},
		{name: "empty text/plain", contentType: "text/plain", wantStatus: 415},
		{name: "no content type", body: `{}`, wantStatus: 415},
		{name: "form", contentType: "application/x-www-form-urlencoded", body: `value=v`, wantStatus: 415},
		{name: "oversized", contentType: "application/json", body: `{"value":"` + big + `"}`, wantStatus: 413, wantText: "BODY_TOO_LARGE"},
		{name: "oversized chunked", contentType: "application/json", body: `{"value":"` + big + `"}`, chunked: true, wantStatus: 413},
		{name: "chunked within the limit", contentType: "application/json", body: `{"value":"v"}`, chunked: true, wantStatus: 200, wantHandler: true},
		{name: "unknown field", contentType: "application/json", body: `{"value":"v","valeu":"w"}`, wantStatus: 400, wantText: `"field":"valeu"`},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			before := putCalls.Load()
			var body io.Reader = strings.NewReader(tt.body)
			if tt.chunked {
				body = io.MultiReader(strings.NewReader(tt.body)) // unknown length: sent chunked
			}
			req, _ := http.NewRequestWithContext(t.Context(), http.MethodPut, "http://"+addr+"/v1/secrets/OK", body)
			if tt.host != "" {
				req.Host = tt.host
			}
			if tt.origin != "" {
				req.Header.Set("Origin", tt.origin)
			}
			if tt.contentType != "" {
				req.Header.Set("Content-Type", tt.contentType)
			}
			resp, err := http.DefaultClient.Do(req)
			if err != nil {
				t.Fatal(err)
			}
			defer resp.Body.Close()
			b, _ := io.ReadAll(resp.Body)
			if resp.StatusCode != tt.wantStatus || !strings.Contains(string(b), tt.wantText) {
				t.Errorf("status %d %s; want %d containing %q", resp.StatusCode, b, tt.wantStatus, tt.wantText)
			}
			if ran := putCalls.Load() > before; ran != tt.wantHandler {
				t.Errorf("handler ran = %v, want %v", ran, tt.wantHandler)
			}
			if resp.StatusCode >= 400 && !strings.HasPrefix(resp.Header.Get("Content-Type"), "application/json") {
				t.Errorf("error content type %q, want a google.rpc.Status JSON", resp.Header.Get("Content-Type"))
			}
		})
	}
}

func TestRESTUnknownQueryParameter(t *testing.T) {
	h := start(t, Config{HTTPAddr: "127.0.0.1:0"})
	for _, tt := range []struct {
		query string
		want  int
		text  string
	}{
		{"prefx=A", 400, `"field":"prefx"`},
		{"prefix=A", 501, ""}, // known: reaches the (unimplemented) handler
	} {
		resp, err := http.Get("http://" + h.srv.HTTPAddr() + "/v1/secrets?" + tt.query)
		if err != nil {
			t.Fatal(err)
		}
		b, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		if resp.StatusCode != tt.want || !strings.Contains(string(b), tt.text) {
			t.Errorf("?%s: %d %s, want %d with %q", tt.query, resp.StatusCode, b, tt.want, tt.text)
		}
	}
}

// TestRESTOversizedBodyIsNotRead announces a huge body and sends none: the
// answer must come at once, without the server waiting to read it.
func TestRESTOversizedBodyIsNotRead(t *testing.T) {
	h := start(t, Config{HTTPAddr: "127.0.0.1:0", MaxMsgBytes: 1 << 16})
	c, err := net.Dial("tcp", h.srv.HTTPAddr())
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	c.SetDeadline(time.Now().Add(10 * time.Second))
	fmt.Fprintf(c, "PUT /v1/secrets/OK HTTP/1.1\r\nHost: %s\r\nContent-Type: application/json\r\nContent-Length: %d\r\n\r\n", h.srv.HTTPAddr(), int64(1)<<40)
	resp, err := http.ReadResponse(bufio.NewReader(c), nil)
	if err != nil {
		t.Fatal(err)
	}
	if resp.StatusCode != http.StatusRequestEntityTooLarge {
		t.Errorf("status %d, want 413", resp.StatusCode)
	}
}

func TestRESTCORS(t *testing.T) {
	h := start(t, Config{HTTPAddr: "127.0.0.1:0", HTTPCORSOrigins: []string{"https://app.example"}})
	req, _ := http.NewRequestWithContext(t.Context(), http.MethodOptions, "http://"+h.srv.HTTPAddr()+"/v1/secrets/OK", nil)
	req.Header.Set("Origin", "https://app.example")
	req.Header.Set("Access-Control-Request-Method", "PUT")
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusNoContent || resp.Header.Get("Access-Control-Allow-Origin") != "https://app.example" ||
		!strings.Contains(resp.Header.Get("Access-Control-Allow-Headers"), "Authorization") {
		t.Errorf("preflight: %d %v", resp.StatusCode, resp.Header)
	}
	req.Header.Set("Origin", "https://other.example")
	resp, err = http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusForbidden || resp.Header.Get("Access-Control-Allow-Origin") != "" {
		t.Errorf("an origin not configured: %d %v", resp.StatusCode, resp.Header)
	}
}

func TestAuthenticatedServer(t *testing.T) {
	fx := authtest.New(t)
	admin, user := fx.Token("root", auth.RoleAdmin), fx.Token("alice", auth.RoleUser)
	h := start(t, Config{HTTPAddr: "127.0.0.1:0", Auth: fx.Store})
	client := h.vaultClient()
	as := func(tok string) context.Context {
		return metadata.AppendToOutgoingContext(t.Context(), "authorization", "Bearer "+tok)
	}
	if _, err := client.GetSecret(t.Context(), &vaultv1.GetSecretRequest{Name: "OK"}); status.Code(err) != codes.Unauthenticated {
		t.Errorf("no token: %v", err)
	}
	if _, err := client.GetSecret(as(user), &vaultv1.GetSecretRequest{Name: "OK"}); status.Code(err) != codes.PermissionDenied {
		t.Errorf("user token on an admin call: %v", err)
	}
	if _, err := client.GetSecret(as(admin), &vaultv1.GetSecretRequest{Name: "OK"}); err != nil {
		t.Errorf("admin: %v", err)
	}
	if _, err := healthpb.NewHealthClient(h.conn).Check(t.Context(), &healthpb.HealthCheckRequest{}); err != nil {
		t.Errorf("health without a token: %v", err)
	}
	// Over REST the same answers, as HTTP statuses.
	for _, tt := range []struct {
		token string
		want  int
		path  string
	}{
		{"", 401, "/v1/secrets/OK"}, {"Bearer nope", 401, "/v1/secrets/OK"}, {"Bearer " + user, 403, "/v1/secrets/OK"}, {"Bearer " + admin, 200, "/v1/secrets/OK"},
		{"", 401, "/openapi.json"}, {"Bearer nope", 401, "/openapi.json"}, {"Bearer " + user, 200, "/openapi.json"}, {"", 200, "/healthz"},
	} {
		req, _ := http.NewRequestWithContext(t.Context(), http.MethodGet, "http://"+h.srv.HTTPAddr()+tt.path, nil)
		if tt.token != "" {
			req.Header.Set("Authorization", tt.token)
		}
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		if resp.StatusCode != tt.want {
			t.Errorf("REST %s with %.12q: %d, want %d", tt.path, tt.token, resp.StatusCode, tt.want)
		}
	}
	// Refusals are logged with the principal and the method, never the token.
	logs := h.logs.String()
	if !strings.Contains(logs, "principal=user:alice") || !strings.Contains(logs, "GetSecret") {
		t.Errorf("refusal log lacks principal or method:\n%s", logs)
	}
	for _, tok := range []string{admin, user} {
		if strings.Contains(logs, tok) {
			t.Errorf("a token was logged")
		}
	}
}

func TestNonLoopbackNeedsTLS(t *testing.T) {
	fx := authtest.New(t)
	var logs syncBuffer
	logger := slog.New(slog.NewTextHandler(&logs, nil))
	_, err := Start(t.Context(), Config{GRPCAddr: "0.0.0.0:0", Auth: fx.Store}, logger, newFakeVault(t))
	if err == nil || !strings.Contains(err.Error(), "-insecure") {
		t.Fatalf("plaintext on 0.0.0.0: %v, want a refusal naming -insecure", err)
	}
	s, err := Start(t.Context(), Config{GRPCAddr: "0.0.0.0:0", Auth: fx.Store, Insecure: true}, logger, newFakeVault(t))
	if err != nil {
		t.Fatal(err)
	}
	s.Shutdown(t.Context())
	if !strings.Contains(logs.String(), "INSECURE") {
		t.Errorf("-insecure start did not warn:\n%s", logs.String())
	}
	certs := newTestCerts(t)
	s, err = Start(t.Context(), Config{GRPCAddr: "0.0.0.0:0", Auth: fx.Store, TLS: certs.server}, logger, newFakeVault(t))
	if err != nil {
		t.Fatalf("TLS on 0.0.0.0: %v", err)
	}
	s.Shutdown(t.Context())
}

func TestTLS(t *testing.T) {
	certs := newTestCerts(t)
	fx := authtest.New(t)
	admin := fx.Token("root", auth.RoleAdmin)
	for _, mtls := range []bool{false, true} {
		t.Run(fmt.Sprintf("mtls=%v", mtls), func(t *testing.T) {
			cfg := Config{GRPCAddr: "127.0.0.1:0", HTTPAddr: "127.0.0.1:0", Auth: fx.Store, TLS: certs.server}
			if !mtls {
				cfg.TLS.ClientCAFile = ""
			}
			h := start(t, cfg)
			call := func(o grpcclient.Options) error {
				o.Token = grpcclient.Static(admin)
				conn, err := grpcclient.New(h.srv.GRPCAddr(), o)
				if err != nil {
					return err
				}
				defer conn.Close()
				ctx, cancel := context.WithTimeout(t.Context(), 5*time.Second)
				defer cancel()
				_, err = vaultv1.NewVaultServiceClient(conn).GetSecret(ctx, &vaultv1.GetSecretRequest{Name: "OK"})
				return err
			}
			withCert := grpcclient.Options{TLSCAFile: certs.caFile, TLSCertFile: certs.clientCert, TLSKeyFile: certs.clientKey}
			if err := call(withCert); err != nil {
				t.Errorf("TLS with a client certificate: %v", err)
			}
			err := call(grpcclient.Options{TLSCAFile: certs.caFile})
			if mtls && err == nil {
				t.Error("mTLS: a client without a certificate got through")
			} else if !mtls && err != nil {
				t.Errorf("TLS: %v", err)
			}
			if err := call(grpcclient.Options{}); err == nil {
				t.Error("a plaintext client got through a TLS listener")
			}

			// REST over HTTPS, through the in-process gateway.
			tc := &tls.Config{RootCAs: certs.pool}
			if mtls {
				cert, _ := tls.LoadX509KeyPair(certs.clientCert, certs.clientKey)
				tc.Certificates = []tls.Certificate{cert}
			}
			hc := &http.Client{Transport: &http.Transport{TLSClientConfig: tc, ForceAttemptHTTP2: true}}
			req, _ := http.NewRequestWithContext(t.Context(), http.MethodGet, "https://"+h.srv.HTTPAddr()+"/v1/secrets/OK", nil)
			req.Header.Set("Authorization", "Bearer "+admin)
			resp, err := hc.Do(req)
			if err != nil {
				t.Fatal(err)
			}
			resp.Body.Close()
			if resp.StatusCode != 200 {
				t.Errorf("REST over TLS: %d", resp.StatusCode)
			}
		})
	}
}

// testCerts is a CA with a server certificate for 127.0.0.1 and a client
// certificate, in files.
type testCerts struct {
	caFile                string
	pool                  *x509.CertPool
	server                TLSConfig
	clientCert, clientKey string
}

func newTestCerts(t testing.TB) testCerts {
	t.Helper()
	dir := t.TempDir()
	key := func() *ecdsa.PrivateKey {
		k, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
		if err != nil {
			t.Fatal(err)
		}
		return k
	}
	write := func(name, typ string, der []byte) string {
		p := filepath.Join(dir, name)
		if err := os.WriteFile(p, pem.EncodeToMemory(&pem.Block{Type: typ, Bytes: der}), 0o600); err != nil {
			t.Fatal(err)
		}
		return p
	}
	caKey := key()
	caTmpl := &x509.Certificate{SerialNumber: big.NewInt(1), Subject: pkix.Name{CommonName: "fabro test CA"},
		NotBefore: time.Now().Add(-time.Hour), NotAfter: time.Now().Add(time.Hour),
		IsCA: true, BasicConstraintsValid: true, KeyUsage: x509.KeyUsageCertSign}
	caDER, err := x509.CreateCertificate(rand.Reader, caTmpl, caTmpl, &caKey.PublicKey, caKey)
	if err != nil {
		t.Fatal(err)
	}
	ca, _ := x509.ParseCertificate(caDER)
	leaf := func(name string, serial int64, usage x509.ExtKeyUsage) (string, string) {
		k := key()
		tmpl := &x509.Certificate{SerialNumber: big.NewInt(serial), Subject: pkix.Name{CommonName: name},
			NotBefore: time.Now().Add(-time.Hour), NotAfter: time.Now().Add(time.Hour),
			ExtKeyUsage: []x509.ExtKeyUsage{usage}, KeyUsage: x509.KeyUsageDigitalSignature,
			IPAddresses: []net.IP{net.IPv4(127, 0, 0, 1)}, DNSNames: []string{"localhost"}}
		der, err := x509.CreateCertificate(rand.Reader, tmpl, ca, &k.PublicKey, caKey)
		if err != nil {
			t.Fatal(err)
		}
		kd, _ := x509.MarshalECPrivateKey(k)
		return write(name+".pem", "CERTIFICATE", der), write(name+"-key.pem", "EC PRIVATE KEY", kd)
	}
	c := testCerts{caFile: write("ca.pem", "CERTIFICATE", caDER), pool: x509.NewCertPool()}
	c.pool.AddCert(ca)
	c.server.CertFile, c.server.KeyFile = leaf("server", 2, x509.ExtKeyUsageServerAuth)
	c.server.ClientCAFile = c.caFile
	c.clientCert, c.clientKey = leaf("client", 3, x509.ExtKeyUsageClientAuth)
	return c
}

// benchServer starts a server for benchmarks and a kept-alive connection
// to it, presenting token when it is not empty.
func benchServer(b *testing.B, cfg Config, o grpcclient.Options) vaultv1.VaultServiceClient {
	b.Helper()
	cfg.GRPCAddr = "127.0.0.1:0"
	srv, err := Start(b.Context(), cfg, slog.New(slog.DiscardHandler), &fakeVault{started: make(chan struct{}, 1), release: make(chan struct{})})
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() { srv.Shutdown(context.Background()) })
	conn, err := grpcclient.New(srv.GRPCAddr(), o)
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() { conn.Close() })
	client := vaultv1.NewVaultServiceClient(conn)
	if _, err := client.GetSecret(b.Context(), &vaultv1.GetSecretRequest{Name: "OK"}); err != nil {
		b.Fatal(err) // also warms the connection up
	}
	return client
}

// sideBySide calls base and other alternately b.N times each and reports
// both medians, the difference and the ratio other/base.
func sideBySide(b *testing.B, baseName, otherName string, base, other func() error) {
	b.Helper()
	bs, ots := make([]time.Duration, 0, b.N), make([]time.Duration, 0, b.N)
	b.ResetTimer()
	for range b.N {
		t0 := time.Now()
		if err := base(); err != nil {
			b.Fatal(err)
		}
		t1 := time.Now()
		if err := other(); err != nil {
			b.Fatal(err)
		}
		bs, ots = append(bs, t1.Sub(t0)), append(ots, time.Since(t1))
	}
	b.StopTimer()
	slices.Sort(bs)
	slices.Sort(ots)
	pb, po := bs[len(bs)/2], ots[len(ots)/2]
	b.ReportMetric(float64(pb.Nanoseconds())/1e3, baseName+"-p50-µs")
	b.ReportMetric(float64(po.Nanoseconds())/1e3, otherName+"-p50-µs")
	b.ReportMetric(float64((po-pb).Nanoseconds())/1e3, "added-p50-µs")
	b.ReportMetric(float64(po)/float64(pb), "ratio")
}

// BenchmarkAuthInterceptor: a unary call with authentication (bearer token,
// one stat of the store file, SHA-256, table lookup) against the same call
// on a server without it, over loopback TCP.
func BenchmarkAuthInterceptor(b *testing.B) {
	fx := authtest.New(b)
	tok := fx.Token("root", auth.RoleAdmin)
	off := benchServer(b, Config{NoAuth: true}, grpcclient.Options{})
	on := benchServer(b, Config{Auth: fx.Store}, grpcclient.Options{Token: grpcclient.Static(tok)})
	req := &vaultv1.GetSecretRequest{Name: "OK"}
	sideBySide(b, "off", "on",
		func() error { _, err := off.GetSecret(b.Context(), req); return err },
		func() error { _, err := on.GetSecret(b.Context(), req); return err })
}

// BenchmarkAuthorize is the interceptor's own work per call, alone: what it
// adds at p50, without the network's noise.
func BenchmarkAuthorize(b *testing.B) {
	fx := authtest.New(b)
	tok := fx.Token("root", auth.RoleAdmin)
	ic := &auth.Interceptor{Verifier: fx.Store, Logger: slog.New(slog.DiscardHandler)}
	ctx := metadata.NewIncomingContext(b.Context(), metadata.Pairs("authorization", "Bearer "+tok))
	const method = "/fabro.vault.v1.VaultService/GetSecret"
	sideBySide(b, "none", "authorize",
		func() error { return nil },
		func() error { _, err := ic.Authorize(ctx, method); return err })
}

// BenchmarkTLS: a unary call over TLS against plaintext, each on its own
// kept-alive connection.
func BenchmarkTLS(b *testing.B) {
	certs := newTestCerts(b)
	plain := benchServer(b, Config{NoAuth: true}, grpcclient.Options{})
	srvTLS := certs.server
	srvTLS.ClientCAFile = ""
	secure := benchServer(b, Config{NoAuth: true, TLS: srvTLS}, grpcclient.Options{TLSCAFile: certs.caFile})
	req := &vaultv1.GetSecretRequest{Name: "OK"}
	sideBySide(b, "plaintext", "tls",
		func() error { _, err := plain.GetSecret(b.Context(), req); return err },
		func() error { _, err := secure.GetSecret(b.Context(), req); return err })
}
