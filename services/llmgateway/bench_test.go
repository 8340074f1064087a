package llmgateway

import (
	"bufio"
	"bytes"
	"context"
	"errors"
	"io"
	"net"
	"net/http"
	"os"
	"runtime"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"

	llmv1 "github.com/fabro-sh/fabro-go/gen/fabro/llm/v1"
	"github.com/fabro-sh/fabro-go/services/llmgateway/fakeprovider"
)

// The benchmarks compare, in one run, calling the fake provider directly
// over HTTP with calling it through the gateway over gRPC on loopback TCP,
// with the openai-chat codec (model groq/llama-3.3-70b-versatile). The
// direct call replays the exact request body the gateway sent.

const benchModel = "groq/llama-3.3-70b-versatile"

type benchEnv struct {
	fp     *fakeprovider.Server
	url    string
	client llmv1.LLMGatewayServiceClient
	http   *http.Client
}

func newBenchEnv(b *testing.B, turn fakeprovider.Turn) *benchEnv {
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
	gw, err := New(context.Background(), Config{CatalogOverlay: path, LookupEnv: func(k string) (string, bool) {
		v, ok := e2eEnv[k]
		return v, ok
	}}, discardLogger())
	if err != nil {
		b.Fatal(err)
	}
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		b.Fatal(err)
	}
	gs := grpc.NewServer()
	gw.RegisterGRPC(gs)
	go func() { _ = gs.Serve(lis) }()
	b.Cleanup(gs.Stop)
	conn, err := grpc.NewClient(lis.Addr().String(), grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() { _ = conn.Close() })
	return &benchEnv{fp: fp, url: l.URL, client: llmv1.NewLLMGatewayServiceClient(conn), http: newHTTPClient()}
}

// capture makes one gateway call and returns the upstream request it sent.
func (e *benchEnv) capture(b *testing.B, stream bool) fakeprovider.Request {
	req := &llmv1.Request{Model: benchModel, Messages: []*llmv1.Message{userText("Say hello.")}, DisableFallbacks: true}
	if stream {
		st, err := e.client.Stream(b.Context(), &llmv1.StreamRequest{Request: req})
		if err != nil {
			b.Fatal(err)
		}
		for {
			if _, err := st.Recv(); err != nil {
				break
			}
		}
	} else if _, err := e.client.Complete(b.Context(), &llmv1.CompleteRequest{Request: req}); err != nil {
		b.Fatal(err)
	}
	reqs := e.fp.Requests()
	return reqs[len(reqs)-1]
}

func (e *benchEnv) direct(ctx context.Context, r fakeprovider.Request, onChunk func([]byte)) error {
	hr, err := http.NewRequestWithContext(ctx, http.MethodPost, e.url+r.Path, bytes.NewReader(r.Body))
	if err != nil {
		return err
	}
	hr.Header = r.Header.Clone()
	resp, err := e.http.Do(hr)
	if err != nil {
		return err
	}
	defer resp.Body.Close()
	if onChunk == nil {
		_, err = io.Copy(io.Discard, resp.Body)
		return err
	}
	sc := bufio.NewScanner(resp.Body)
	for sc.Scan() {
		if line := sc.Bytes(); bytes.HasPrefix(line, []byte("data: ")) {
			onChunk(line)
		}
	}
	return sc.Err()
}

// isTextDelta reports whether an openai-chat SSE line carries text: the
// first chunk is the role chunk with "content":"", which is not text, so
// both paths stop the clock at the same event (the first text delta).
func isTextDelta(line []byte) bool {
	i := bytes.Index(line, []byte(`"content":"`))
	return i >= 0 && !bytes.HasPrefix(line[i+len(`"content":"`):], []byte(`"`))
}

func pct(ds []time.Duration, p float64) time.Duration {
	if len(ds) == 0 {
		return 0
	}
	s := slices.Clone(ds)
	slices.Sort(s)
	return s[int(float64(len(s)-1)*p)]
}

func us(d time.Duration) float64 { return float64(d.Nanoseconds()) / 1e3 }

// BenchmarkUnaryAddedLatency: one non-streamed request at a time, direct
// and through the gateway alternately; reports both p50s and the added p50.
func BenchmarkUnaryAddedLatency(b *testing.B) {
	e := newBenchEnv(b, fakeprovider.Turn{Text: strings.Repeat("Hello there. ", 100), Usage: fakeprovider.Usage{Input: 12, Output: 300}})
	raw := e.capture(b, false)
	req := &llmv1.CompleteRequest{Request: &llmv1.Request{Model: benchModel, Messages: []*llmv1.Message{userText("Say hello.")}, DisableFallbacks: true}}
	for range 50 { // warm both paths
		_ = e.direct(b.Context(), raw, nil)
		_, _ = e.client.Complete(b.Context(), req)
	}
	var direct, gateway []time.Duration
	b.ResetTimer()
	for b.Loop() {
		t0 := time.Now()
		if err := e.direct(b.Context(), raw, nil); err != nil {
			b.Fatal(err)
		}
		t1 := time.Now()
		if _, err := e.client.Complete(b.Context(), req); err != nil {
			b.Fatal(err)
		}
		direct, gateway = append(direct, t1.Sub(t0)), append(gateway, time.Since(t1))
	}
	b.ReportMetric(us(pct(direct, .5)), "direct-p50-µs")
	b.ReportMetric(us(pct(gateway, .5)), "gateway-p50-µs")
	b.ReportMetric(us(pct(gateway, .5)-pct(direct, .5)), "added-p50-µs")
	b.ReportMetric(us(pct(gateway, .99)-pct(direct, .99)), "added-p99-µs")
	b.ReportMetric(float64(pct(gateway, .5))/float64(pct(direct, .5)), "p50-ratio")
}

// BenchmarkStream64: 64 concurrent streams of 64 text chunks each, direct
// and through the gateway in turn per iteration; reports added time to
// first token and the gateway's added time per chunk.
func BenchmarkStream64(b *testing.B) {
	const streams, chunkRunes = 64, 4
	text := strings.Repeat("abcd", 64) // 64 chunks
	e := newBenchEnv(b, fakeprovider.Turn{Text: text, ChunkRunes: chunkRunes, Usage: fakeprovider.Usage{Input: 12, Output: 64}})
	raw := e.capture(b, true)
	req := &llmv1.StreamRequest{Request: &llmv1.Request{Model: benchModel, Messages: []*llmv1.Message{userText("Say hello.")}, DisableFallbacks: true}}

	type result struct{ ttft, total time.Duration }
	run := func(one func() (result, error)) (ttft, total []time.Duration) {
		var mu sync.Mutex
		var wg sync.WaitGroup
		for range streams {
			wg.Go(func() {
				r, err := one()
				if err != nil {
					b.Error(err)
					return
				}
				mu.Lock()
				ttft, total = append(ttft, r.ttft), append(total, r.total)
				mu.Unlock()
			})
		}
		wg.Wait()
		return ttft, total
	}
	directOne := func() (result, error) {
		start := time.Now()
		var r result
		err := e.direct(b.Context(), raw, func(line []byte) {
			if r.ttft == 0 && isTextDelta(line) {
				r.ttft = time.Since(start)
			}
		})
		r.total = time.Since(start)
		return r, err
	}
	gatewayOne := func() (result, error) {
		start := time.Now()
		var r result
		st, err := e.client.Stream(b.Context(), req)
		if err != nil {
			return r, err
		}
		for {
			m, err := st.Recv()
			if errors.Is(err, io.EOF) {
				break
			}
			if err != nil {
				return r, err
			}
			if r.ttft == 0 && m.GetTextDelta() != nil {
				r.ttft = time.Since(start)
			}
		}
		r.total = time.Since(start)
		return r, nil
	}
	run(directOne)
	run(gatewayOne)
	var dT, dTot, gT, gTot []time.Duration
	var dWall, gWall time.Duration // whole batches: the throughput view
	b.ResetTimer()
	for b.Loop() {
		t0 := time.Now()
		t, tot := run(directOne)
		t1 := time.Now()
		dT, dTot = append(dT, t...), append(dTot, tot...)
		t, tot = run(gatewayOne)
		gWall += time.Since(t1)
		dWall += t1.Sub(t0)
		gT, gTot = append(gT, t...), append(gTot, tot...)
	}
	chunks := float64(len(text) / chunkRunes)
	b.ReportMetric(us(pct(dT, .5)), "direct-ttft-p50-µs")
	b.ReportMetric(us(pct(gT, .5)), "gateway-ttft-p50-µs")
	b.ReportMetric(us(pct(gT, .5)-pct(dT, .5)), "added-ttft-p50-µs")
	b.ReportMetric(us(pct(dTot, .5))/chunks, "direct-µs/chunk")
	b.ReportMetric(us(pct(gTot, .5))/chunks, "gateway-µs/chunk")
	b.ReportMetric((us(pct(gTot, .5))-us(pct(dTot, .5)))/chunks, "added-µs/chunk")
	b.ReportMetric(float64(pct(gTot, .5))/float64(pct(dTot, .5)), "total-ratio")
	// Added wall time per chunk delivered, all 64 streams together: what
	// the gateway costs per chunk when the machine is saturated.
	all := float64(b.N) * streams * chunks
	b.ReportMetric(us(gWall-dWall)/all, "added-µs/chunk-aggregate")
}

// BenchmarkRSS1000Streams holds 1,000 streams open (each has sent its first
// delta and waits for the rest), first directly, then through the gateway,
// and reports the process RSS growth for each. Fake provider, gateway and
// clients share this process, so the gateway figure is the difference.
func BenchmarkRSS1000Streams(b *testing.B) {
	const n = 1000
	turn := fakeprovider.Turn{Text: "first chunk, then a long wait", ChunkRunes: 12, ChunkDelay: time.Hour}
	for b.Loop() {
		e := newBenchEnv(b, fakeprovider.Turn{Text: "quick"})
		raw := e.capture(b, true) // before the held turns, which never end
		e.fp.Script(func(fakeprovider.Request) fakeprovider.Turn { return turn })
		// hold returns the growth of live memory (heap and stacks in use,
		// after GC) with n streams open; RSS would favour whichever phase
		// runs second, since freed pages stay resident.
		hold := func(open func(ctx context.Context, ready chan<- struct{})) uint64 {
			ctx, cancel := context.WithCancel(b.Context())
			ready := make(chan struct{}, n)
			var wg sync.WaitGroup
			runtime.GC()
			before := live()
			for range n {
				wg.Go(func() { open(ctx, ready) })
			}
			for range n {
				<-ready
			}
			runtime.GC()
			after := live()
			cancel()
			wg.Wait()
			if after < before {
				return 0
			}
			return after - before
		}
		direct := hold(func(ctx context.Context, ready chan<- struct{}) {
			once := sync.OnceFunc(func() { ready <- struct{}{} })
			_ = e.direct(ctx, raw, func([]byte) { once() })
			once()
		})
		gateway := hold(func(ctx context.Context, ready chan<- struct{}) {
			once := sync.OnceFunc(func() { ready <- struct{}{} })
			defer once()
			st, err := e.client.Stream(ctx, &llmv1.StreamRequest{Request: &llmv1.Request{Model: benchModel, Messages: []*llmv1.Message{userText("hi")}, DisableFallbacks: true}})
			if err != nil {
				return
			}
			for {
				m, err := st.Recv()
				if err != nil {
					return
				}
				if m.GetTextDelta() != nil {
					once()
				}
			}
		})
		b.ReportMetric(float64(direct)/(1<<20), "direct-live-MiB")
		b.ReportMetric(float64(gateway)/(1<<20), "gateway-live-MiB")
		b.ReportMetric(float64(gateway)/n/1024, "gateway-live-KiB/stream")
		b.ReportMetric(float64(rss())/(1<<20), "process-rss-MiB")
	}
}

func live() uint64 {
	var m runtime.MemStats
	runtime.ReadMemStats(&m)
	return m.HeapInuse + m.StackInuse
}

// rss reads the resident set size from /proc (Linux).
func rss() uint64 {
	b, err := os.ReadFile("/proc/self/status")
	if err != nil {
		return 0
	}
	for line := range strings.SplitSeq(string(b), "\n") {
		if v, ok := strings.CutPrefix(line, "VmRSS:"); ok {
			kb, _ := strconv.ParseUint(strings.TrimSpace(strings.TrimSuffix(strings.TrimSpace(v), "kB")), 10, 64)
			return kb * 1024
		}
	}
	return 0
}
