package llmgateway

import (
	"bufio"
	"bytes"
	"context"
	"fmt"
	"io"
	"log"
	"log/slog"
	"net"
	"net/http"
	"net/http/httputil"
	"net/url"
	"os"
	"strings"
	"sync"
	"testing"
	"time"

	"go.opentelemetry.io/otel"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"

	llmv1 "github.com/fabro-sh/fabro-go/gen/fabro/llm/v1"
	"github.com/fabro-sh/fabro-go/platform/server"
	"github.com/fabro-sh/fabro-go/services/llmgateway/fakeprovider"
)

// The stack benchmarks measure what users run: the gateway inside the
// shipped server (platform/server: its interceptors, its JSON access log,
// OpenTelemetry with a sampling SDK tracer provider, the REST gateway and
// the compatible endpoints), in front of the fake provider, side by side in
// one run with the floor: the same upstream request sent directly, and
// through a bare httputil.ReverseProxy (one loopback HTTP hop). Added
// latency is each path's latency minus direct; the ratios divide it by the
// bare proxy's added latency.
//
//	go test -run '^$' -bench 'Stack' -benchtime 2000x ./services/llmgateway/

type stackEnv struct {
	fp       *fakeprovider.Server
	upstream string // the fake's URL
	proxy    string // the bare reverse proxy's URL
	rest     string // the server's REST base URL
	grpc     llmv1.LLMGatewayServiceClient
	http     *http.Client
	raw      fakeprovider.Request // the upstream request the gateway sends
	rawStrm  fakeprovider.Request
}

func newStackEnv(b *testing.B, turn fakeprovider.Turn) *stackEnv {
	b.Helper()
	fp := fakeprovider.New()
	fp.Script(func(fakeprovider.Request) fakeprovider.Turn { return turn })
	l, err := fakeprovider.Listen("127.0.0.1:0", fp)
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() { _ = l.Close() })
	path := b.TempDir() + "/overlay.json"
	if err := os.WriteFile(path, fakeprovider.CatalogOverlay(l.URL), 0o600); err != nil {
		b.Fatal(err)
	}
	// The shipped observability: a sampling SDK tracer (no exporter, so the
	// spans cost what building them costs) and a JSON logger at info.
	tp := sdktrace.NewTracerProvider(sdktrace.WithSampler(sdktrace.AlwaysSample()))
	prev := otel.GetTracerProvider()
	otel.SetTracerProvider(tp)
	b.Cleanup(func() { otel.SetTracerProvider(prev); _ = tp.Shutdown(context.Background()) })
	logger := slog.New(slog.NewJSONHandler(io.Discard, &slog.HandlerOptions{Level: slog.LevelInfo}))

	gw, err := New(context.Background(), Config{CatalogOverlay: path, TracerProvider: tp, LookupEnv: func(k string) (string, bool) {
		v, ok := e2eEnv[k]
		return v, ok
	}}, logger)
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() { _ = gw.Close() })
	gw.SetAuthenticator(fixedToken("t")) // the key the compatible fronts' requests present
	srv, err := server.Start(context.Background(), server.Config{GRPCAddr: "127.0.0.1:0", HTTPAddr: "127.0.0.1:0", NoAuth: true}, logger, gw)
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() { _ = srv.Shutdown(context.Background()) })
	conn, err := grpc.NewClient(srv.GRPCAddr(), grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() { _ = conn.Close() })

	target, _ := url.Parse(l.URL)
	rp := httputil.NewSingleHostReverseProxy(target)
	pt := http.DefaultTransport.(*http.Transport).Clone()
	pt.MaxIdleConnsPerHost = 256
	rp.Transport = pt
	rp.FlushInterval = -1 // stream as it comes, as the gateway does
	rp.ErrorLog = log.New(os.Stderr, "bare proxy: ", 0)
	pl, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		b.Fatal(err)
	}
	// Full duplex, as the gateway's own HTTP server is: without it, Go's
	// server closes the request body once the response starts, and a
	// streamed reply through the proxy ends in "unexpected EOF".
	ps := &http.Server{Handler: http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		_ = http.NewResponseController(w).EnableFullDuplex()
		rp.ServeHTTP(w, r)
	})}
	go func() { _ = ps.Serve(pl) }()
	b.Cleanup(func() { _ = ps.Close() })

	e := &stackEnv{fp: fp, upstream: l.URL, proxy: "http://" + pl.Addr().String(), rest: "http://" + srv.HTTPAddr(),
		grpc: llmv1.NewLLMGatewayServiceClient(conn), http: newHTTPClient()}
	req := &llmv1.Request{Model: benchModel, Messages: []*llmv1.Message{userText("Say hello.")}, DisableFallbacks: true}
	if _, err := e.grpc.Complete(b.Context(), &llmv1.CompleteRequest{Request: req}); err != nil {
		b.Fatal(err)
	}
	reqs := fp.Requests()
	e.raw = reqs[len(reqs)-1]
	st, err := e.grpc.Stream(b.Context(), &llmv1.StreamRequest{Request: req})
	if err != nil {
		b.Fatal(err)
	}
	for {
		if _, err := st.Recv(); err != nil {
			break
		}
	}
	reqs = fp.Requests()
	e.rawStrm = reqs[len(reqs)-1]
	return e
}

// path is one way to make the call; firstText, when set, is called once at
// the first text delta the client sees.
type path struct {
	name string
	do   func(ctx context.Context, stream bool, firstText func()) error
}

func (e *stackEnv) paths() []path {
	httpPost := func(base string, raw *fakeprovider.Request) func(context.Context, bool, func()) error {
		return func(ctx context.Context, stream bool, first func()) error {
			r := e.raw
			if stream {
				r = e.rawStrm
			}
			if raw != nil {
				r = *raw
			}
			hr, err := http.NewRequestWithContext(ctx, http.MethodPost, base+r.Path, bytes.NewReader(r.Body))
			if err != nil {
				return err
			}
			hr.Header = r.Header.Clone()
			return e.read(hr, stream, first, isTextDelta)
		}
	}
	body := func(s string) func(context.Context, bool, func()) error {
		return func(ctx context.Context, stream bool, first func()) error {
			b := strings.Replace(s, `"STREAM"`, fmt.Sprint(stream), 1)
			u, _, _ := strings.Cut(b, " ")
			hr, err := http.NewRequestWithContext(ctx, http.MethodPost, e.rest+u, strings.NewReader(b[len(u)+1:]))
			if err != nil {
				return err
			}
			hr.Header.Set("Content-Type", "application/json")
			hr.Header.Set("Authorization", "Bearer t")
			hr.Header.Set("X-Api-Key", "t")
			return e.read(hr, stream, first, func(line []byte) bool {
				return bytes.Contains(line, []byte(`"text_delta"`)) || bytes.Contains(line, []byte(`"textDelta"`)) ||
					bytes.Contains(line, []byte(`"response.output_text.delta"`)) || isTextDelta(line)
			})
		}
	}
	req := &llmv1.Request{Model: benchModel, Messages: []*llmv1.Message{userText("Say hello.")}, DisableFallbacks: true}
	return []path{
		{"direct", httpPost(e.upstream, nil)},
		{"proxy", httpPost(e.proxy, nil)},
		{"grpc", func(ctx context.Context, stream bool, first func()) error {
			if !stream {
				_, err := e.grpc.Complete(ctx, &llmv1.CompleteRequest{Request: req})
				return err
			}
			st, err := e.grpc.Stream(ctx, &llmv1.StreamRequest{Request: req})
			if err != nil {
				return err
			}
			for {
				m, err := st.Recv()
				if err == io.EOF {
					return nil
				}
				if err != nil {
					return err
				}
				if first != nil && m.GetTextDelta() != nil {
					first()
					first = nil
				}
			}
		}},
		{"rest", func(ctx context.Context, stream bool, first func()) error {
			if stream {
				return body(`/v1/llm:stream {"request":{"model":"`+benchModel+`","messages":[{"role":"ROLE_USER","parts":[{"text":{"text":"Say hello."}}]}],"disableFallbacks":true}}`)(ctx, stream, first)
			}
			return body(`/v1/llm:complete {"request":{"model":"`+benchModel+`","messages":[{"role":"ROLE_USER","parts":[{"text":{"text":"Say hello."}}]}],"disableFallbacks":true}}`)(ctx, stream, first)
		}},
		{"openai-chat", body(`/openai/v1/chat/completions {"model":"` + benchModel + `","stream":"STREAM","messages":[{"role":"user","content":"Say hello."}]}`)},
		{"openai-responses", body(`/openai/v1/responses {"model":"` + benchModel + `","stream":"STREAM","input":"Say hello."}`)},
		{"anthropic", body(`/anthropic/v1/messages {"model":"` + benchModel + `","stream":"STREAM","max_tokens":1024,"messages":[{"role":"user","content":"Say hello."}]}`)},
	}
}

// read drains a response, calling first at the first line isText accepts.
func (e *stackEnv) read(hr *http.Request, stream bool, first func(), isText func([]byte) bool) error {
	resp, err := e.http.Do(hr)
	if err != nil {
		return err
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		b, _ := io.ReadAll(resp.Body)
		return fmt.Errorf("%s: %d %s", hr.URL.Path, resp.StatusCode, b)
	}
	if !stream || first == nil {
		_, err = io.Copy(io.Discard, resp.Body)
		return err
	}
	sc := bufio.NewScanner(resp.Body)
	sc.Buffer(make([]byte, 64<<10), 1<<20)
	for sc.Scan() {
		if first != nil && isText(sc.Bytes()) {
			first()
			first = nil
		}
	}
	return sc.Err()
}

// sample runs conc concurrent calls of one path and returns each latency
// (stream: time to first text, and the whole stream).
func sample(ctx context.Context, b *testing.B, p path, conc int, stream bool) (lat, ttft []time.Duration) {
	var mu sync.Mutex
	var wg sync.WaitGroup
	for range conc {
		wg.Go(func() {
			start := time.Now()
			var t time.Duration
			first := func() { t = time.Since(start) }
			if !stream {
				first = nil
			}
			if err := p.do(ctx, stream, first); err != nil {
				b.Errorf("%s: %v", p.name, err)
				return
			}
			d := time.Since(start)
			mu.Lock()
			lat, ttft = append(lat, d), append(ttft, t)
			mu.Unlock()
		})
	}
	wg.Wait()
	return lat, ttft
}

// BenchmarkStackUnary: added latency of a non-streamed call at concurrency
// 1 and 64, per path, as ratios to the bare proxy's.
func BenchmarkStackUnary(b *testing.B) {
	for _, conc := range []int{1, 64} {
		b.Run(fmt.Sprintf("c%d", conc), func(b *testing.B) {
			e := newStackEnv(b, fakeprovider.Turn{Text: strings.Repeat("Hello there. ", 100), Usage: fakeprovider.Usage{Input: 12, Output: 300}})
			ps := e.paths()
			lat := make([][]time.Duration, len(ps))
			for range 20 { // warm every path
				for _, p := range ps {
					sample(b.Context(), b, p, conc, false)
				}
			}
			b.ResetTimer()
			for b.Loop() {
				for i, p := range ps { // interleaved: drift hits every path alike
					l, _ := sample(b.Context(), b, p, conc, false)
					lat[i] = append(lat[i], l...)
				}
			}
			report(b, ps, lat, "")
		})
	}
}

// BenchmarkStackStream: a 64-chunk stream at concurrency 1 and 64: added
// time to first text and added cost per chunk, as ratios to the proxy's.
func BenchmarkStackStream(b *testing.B) {
	const chunkRunes = 4
	text := strings.Repeat("abcd", 64)
	chunks := float64(len(text) / chunkRunes)
	for _, conc := range []int{1, 64} {
		b.Run(fmt.Sprintf("c%d", conc), func(b *testing.B) {
			e := newStackEnv(b, fakeprovider.Turn{Text: text, ChunkRunes: chunkRunes, Usage: fakeprovider.Usage{Input: 12, Output: 64}})
			ps := e.paths()
			ttft := make([][]time.Duration, len(ps))
			perChunk := make([][]time.Duration, len(ps))
			for range 10 {
				for _, p := range ps {
					sample(b.Context(), b, p, conc, true)
				}
			}
			b.ResetTimer()
			for b.Loop() {
				for i, p := range ps {
					l, t := sample(b.Context(), b, p, conc, true)
					for j := range l {
						if t[j] == 0 {
							b.Fatalf("%s saw no text", p.name)
						}
						ttft[i] = append(ttft[i], t[j])
						perChunk[i] = append(perChunk[i], time.Duration(float64(l[j]-t[j])/(chunks-1)))
					}
				}
			}
			report(b, ps, ttft, "ttft-")
			report(b, ps, perChunk, "chunk-")
		})
	}
}

// report writes each path's added p50 and p99 over direct, and its ratio to
// the bare proxy's added latency.
func report(b *testing.B, ps []path, lat [][]time.Duration, prefix string) {
	base50, base99 := pct(lat[0], .5), pct(lat[0], .99)
	proxy50, proxy99 := pct(lat[1], .5)-base50, pct(lat[1], .99)-base99
	b.ReportMetric(us(base50), prefix+"direct-p50-µs")
	for i, p := range ps[1:] {
		a50, a99 := pct(lat[i+1], .5)-base50, pct(lat[i+1], .99)-base99
		b.ReportMetric(us(a50), prefix+p.name+"-added-p50-µs")
		b.ReportMetric(us(a99), prefix+p.name+"-added-p99-µs")
		if p.name == "proxy" {
			continue
		}
		// A ratio to a non-positive floor is noise, not a figure.
		if proxy50 > 0 {
			b.ReportMetric(float64(a50)/float64(proxy50), prefix+p.name+"-x-proxy-p50")
		}
		if proxy99 > 0 {
			b.ReportMetric(float64(a99)/float64(proxy99), prefix+p.name+"-x-proxy-p99")
		}
	}
}
