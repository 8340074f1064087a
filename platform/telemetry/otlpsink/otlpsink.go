// Package otlpsink is a small OTLP receiver: it accepts traces and metrics
// over OTLP/gRPC and OTLP/HTTP (protobuf), keeps the last spans in memory
// and serves them back as JSON by trace. Tests use it as the collector;
// cmd/otlpsink is the same thing as a binary for compose and for a person
// who wants to see a prompt's trace without running a tracing backend.
package otlpsink

import (
	"compress/gzip"
	"context"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/http"
	"sort"
	"sync"
	"time"

	collmetrics "go.opentelemetry.io/proto/otlp/collector/metrics/v1"
	colltrace "go.opentelemetry.io/proto/otlp/collector/trace/v1"
	commonpb "go.opentelemetry.io/proto/otlp/common/v1"
	metricspb "go.opentelemetry.io/proto/otlp/metrics/v1"
	tracepb "go.opentelemetry.io/proto/otlp/trace/v1"
	"google.golang.org/grpc"
	"google.golang.org/protobuf/encoding/protojson"
	"google.golang.org/protobuf/proto"
)

// Span is one received span, flattened.
type Span struct {
	Service      string            `json:"service"`
	Scope        string            `json:"scope"`
	TraceID      string            `json:"trace_id"`
	SpanID       string            `json:"span_id"`
	ParentSpanID string            `json:"parent_span_id,omitempty"`
	Name         string            `json:"name"`
	Kind         string            `json:"kind"`
	Start        time.Time         `json:"start"`
	Duration     time.Duration     `json:"duration_ns"`
	Attributes   map[string]string `json:"attributes,omitempty"`
	Events       []Event           `json:"events,omitempty"`
	StatusError  string            `json:"status_error,omitempty"`
	// Raw is the span as protobuf JSON, every field included: what a test
	// searches for a canary.
	Raw string `json:"-"`
}

// Event is a span event.
type Event struct {
	Name       string            `json:"name"`
	Attributes map[string]string `json:"attributes,omitempty"`
}

// Sink stores what it receives. The zero value is not usable; use New.
type Sink struct {
	max   int
	noRaw bool

	mu      sync.Mutex
	spans   []Span
	metrics []*metricspb.ResourceMetrics
	changed chan struct{}
	onSpan  func(Span)
}

// New returns a sink keeping at most max spans (the oldest go first) and
// max metric batches; onSpan, if not nil, is called with each span.
func New(max int, onSpan func(Span)) *Sink {
	return &Sink{max: max, changed: make(chan struct{}), onSpan: onSpan}
}

// WithoutRaw makes the sink skip Span.Raw, the costly part of receiving:
// for benchmarks, whose receiver shares the machine with what is measured.
func (s *Sink) WithoutRaw() *Sink {
	s.noRaw = true
	return s
}

func (s *Sink) addTraces(rs []*tracepb.ResourceSpans) {
	var got []Span
	for _, r := range rs {
		service := attrString(r.GetResource().GetAttributes(), "service.name")
		for _, ss := range r.GetScopeSpans() {
			for _, sp := range ss.GetSpans() {
				x := Span{
					Service: service, Scope: ss.GetScope().GetName(),
					TraceID: hex.EncodeToString(sp.GetTraceId()), SpanID: hex.EncodeToString(sp.GetSpanId()),
					Name: sp.GetName(), Kind: sp.GetKind().String(),
					Start:      time.Unix(0, int64(sp.GetStartTimeUnixNano())),
					Duration:   time.Duration(sp.GetEndTimeUnixNano() - sp.GetStartTimeUnixNano()),
					Attributes: attrMap(sp.GetAttributes()),
				}
				if !s.noRaw {
					x.Raw = string(mustJSON(sp)) + string(mustJSON(r.GetResource()))
				}
				if len(sp.GetParentSpanId()) > 0 {
					x.ParentSpanID = hex.EncodeToString(sp.GetParentSpanId())
				}
				if sp.GetStatus().GetCode() == tracepb.Status_STATUS_CODE_ERROR {
					x.StatusError = sp.GetStatus().GetMessage()
					if x.StatusError == "" {
						x.StatusError = "error"
					}
				}
				for _, e := range sp.GetEvents() {
					x.Events = append(x.Events, Event{Name: e.GetName(), Attributes: attrMap(e.GetAttributes())})
				}
				got = append(got, x)
			}
		}
	}
	s.mu.Lock()
	s.spans = append(s.spans, got...)
	if over := len(s.spans) - s.max; over > 0 {
		s.spans = append([]Span(nil), s.spans[over:]...)
	}
	s.notifyLocked()
	onSpan := s.onSpan
	s.mu.Unlock()
	if onSpan != nil {
		for _, x := range got {
			onSpan(x)
		}
	}
}

func mustJSON(m proto.Message) []byte {
	b, _ := protojson.Marshal(m)
	return b
}

func (s *Sink) addMetrics(rm []*metricspb.ResourceMetrics) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.metrics = append(s.metrics, rm...)
	if over := len(s.metrics) - s.max; over > 0 {
		s.metrics = append([]*metricspb.ResourceMetrics(nil), s.metrics[over:]...)
	}
	s.notifyLocked()
}

func (s *Sink) notifyLocked() {
	close(s.changed)
	s.changed = make(chan struct{})
}

// Spans returns a copy of the spans received so far.
func (s *Sink) Spans() []Span {
	s.mu.Lock()
	defer s.mu.Unlock()
	return append([]Span(nil), s.spans...)
}

// MetricNames returns the names of every metric received so far.
func (s *Sink) MetricNames() map[string]bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	out := map[string]bool{}
	for _, rm := range s.metrics {
		for _, sm := range rm.GetScopeMetrics() {
			for _, m := range sm.GetMetrics() {
				out[m.GetName()] = true
			}
		}
	}
	return out
}

// Wait blocks until cond, called with everything received, holds, or ctx
// ends.
func (s *Sink) Wait(ctx context.Context, cond func(spans []Span, metrics map[string]bool) bool) error {
	for {
		s.mu.Lock()
		ch := s.changed
		s.mu.Unlock()
		if cond(s.Spans(), s.MetricNames()) {
			return nil
		}
		select {
		case <-ch:
		case <-ctx.Done():
			return ctx.Err()
		}
	}
}

// Trace returns the spans of one trace, by start time.
func (s *Sink) Trace(traceID string) []Span {
	var out []Span
	for _, x := range s.Spans() {
		if x.TraceID == traceID {
			out = append(out, x)
		}
	}
	sort.Slice(out, func(i, j int) bool { return out[i].Start.Before(out[j].Start) })
	return out
}

// RegisterGRPC registers the OTLP trace and metrics services.
func (s *Sink) RegisterGRPC(r grpc.ServiceRegistrar) {
	colltrace.RegisterTraceServiceServer(r, traceServer{s: s})
	collmetrics.RegisterMetricsServiceServer(r, metricsServer{s: s})
}

type traceServer struct {
	colltrace.UnimplementedTraceServiceServer
	s *Sink
}

func (t traceServer) Export(_ context.Context, req *colltrace.ExportTraceServiceRequest) (*colltrace.ExportTraceServiceResponse, error) {
	t.s.addTraces(req.GetResourceSpans())
	return &colltrace.ExportTraceServiceResponse{}, nil
}

type metricsServer struct {
	collmetrics.UnimplementedMetricsServiceServer
	s *Sink
}

func (m metricsServer) Export(_ context.Context, req *collmetrics.ExportMetricsServiceRequest) (*collmetrics.ExportMetricsServiceResponse, error) {
	m.s.addMetrics(req.GetResourceMetrics())
	return &collmetrics.ExportMetricsServiceResponse{}, nil
}

// Handler serves OTLP/HTTP (POST /v1/traces, /v1/metrics, protobuf or
// JSON, optionally gzip) and the query API: GET /api/traces lists trace
// ids with their root span, GET /api/traces/{id} returns a trace's spans.
func (s *Sink) Handler() http.Handler {
	mux := http.NewServeMux()
	mux.HandleFunc("POST /v1/traces", func(w http.ResponseWriter, r *http.Request) {
		var req colltrace.ExportTraceServiceRequest
		if !decode(w, r, &req) {
			return
		}
		s.addTraces(req.GetResourceSpans())
		reply(w, r, &colltrace.ExportTraceServiceResponse{})
	})
	mux.HandleFunc("POST /v1/metrics", func(w http.ResponseWriter, r *http.Request) {
		var req collmetrics.ExportMetricsServiceRequest
		if !decode(w, r, &req) {
			return
		}
		s.addMetrics(req.GetResourceMetrics())
		reply(w, r, &collmetrics.ExportMetricsServiceResponse{})
	})
	mux.HandleFunc("GET /api/traces", func(w http.ResponseWriter, _ *http.Request) {
		type summary struct {
			TraceID string    `json:"trace_id"`
			Root    string    `json:"root"`
			Start   time.Time `json:"start"`
			Spans   int       `json:"spans"`
		}
		by := map[string]*summary{}
		var order []string
		for _, x := range s.Spans() {
			t := by[x.TraceID]
			if t == nil {
				t = &summary{TraceID: x.TraceID, Start: x.Start}
				by[x.TraceID] = t
				order = append(order, x.TraceID)
			}
			t.Spans++
			if x.ParentSpanID == "" || x.Start.Before(t.Start) {
				t.Root, t.Start = x.Service+": "+x.Name, x.Start
			}
		}
		out := make([]*summary, 0, len(order))
		for _, id := range order {
			out = append(out, by[id])
		}
		writeJSON(w, out)
	})
	mux.HandleFunc("GET /api/traces/{id}", func(w http.ResponseWriter, r *http.Request) {
		writeJSON(w, s.Trace(r.PathValue("id")))
	})
	return mux
}

func writeJSON(w http.ResponseWriter, v any) {
	w.Header().Set("Content-Type", "application/json")
	enc := json.NewEncoder(w)
	enc.SetIndent("", "  ")
	_ = enc.Encode(v)
}

const maxBody = 32 << 20

func decode(w http.ResponseWriter, r *http.Request, m proto.Message) bool {
	var body io.Reader = http.MaxBytesReader(w, r.Body, maxBody)
	if r.Header.Get("Content-Encoding") == "gzip" {
		zr, err := gzip.NewReader(body)
		if err != nil {
			http.Error(w, "bad gzip body", http.StatusBadRequest)
			return false
		}
		defer zr.Close()
		body = io.LimitReader(zr, maxBody)
	}
	b, err := io.ReadAll(body)
	if err != nil {
		http.Error(w, "cannot read the body", http.StatusBadRequest)
		return false
	}
	if r.Header.Get("Content-Type") == "application/json" {
		err = protojson.Unmarshal(b, m)
	} else {
		err = proto.Unmarshal(b, m)
	}
	if err != nil {
		http.Error(w, "malformed OTLP request: "+err.Error(), http.StatusBadRequest)
		return false
	}
	return true
}

func reply(w http.ResponseWriter, r *http.Request, m proto.Message) {
	if r.Header.Get("Content-Type") == "application/json" {
		w.Header().Set("Content-Type", "application/json")
		b, _ := protojson.Marshal(m)
		_, _ = w.Write(b)
		return
	}
	w.Header().Set("Content-Type", "application/x-protobuf")
	b, _ := proto.Marshal(m)
	_, _ = w.Write(b)
}

func attrMap(kvs []*commonpb.KeyValue) map[string]string {
	if len(kvs) == 0 {
		return nil
	}
	out := make(map[string]string, len(kvs))
	for _, kv := range kvs {
		out[kv.GetKey()] = valueString(kv.GetValue())
	}
	return out
}

func attrString(kvs []*commonpb.KeyValue, key string) string {
	for _, kv := range kvs {
		if kv.GetKey() == key {
			return valueString(kv.GetValue())
		}
	}
	return ""
}

func valueString(v *commonpb.AnyValue) string {
	switch x := v.GetValue().(type) {
	case *commonpb.AnyValue_StringValue:
		return x.StringValue
	case *commonpb.AnyValue_IntValue:
		return fmt.Sprint(x.IntValue)
	case *commonpb.AnyValue_DoubleValue:
		return fmt.Sprint(x.DoubleValue)
	case *commonpb.AnyValue_BoolValue:
		return fmt.Sprint(x.BoolValue)
	default:
		b, _ := protojson.Marshal(v)
		return string(b)
	}
}

// Listeners is a sink served on a gRPC and an HTTP listener.
type Listeners struct {
	*Sink
	GRPCAddr, HTTPAddr string // host:port
	grpc               *grpc.Server
	http               *http.Server
	wg                 sync.WaitGroup
}

// Listen serves s on grpcAddr and httpAddr (port 0 picks one).
func Listen(s *Sink, grpcAddr, httpAddr string) (*Listeners, error) {
	gl, err := net.Listen("tcp", grpcAddr)
	if err != nil {
		return nil, err
	}
	hl, err := net.Listen("tcp", httpAddr)
	if err != nil {
		gl.Close()
		return nil, err
	}
	l := &Listeners{Sink: s, GRPCAddr: gl.Addr().String(), HTTPAddr: hl.Addr().String(),
		grpc: grpc.NewServer(grpc.MaxRecvMsgSize(maxBody)),
		http: &http.Server{Handler: s.Handler(), ReadHeaderTimeout: 10 * time.Second}}
	s.RegisterGRPC(l.grpc)
	l.wg.Go(func() { _ = l.grpc.Serve(gl) })
	l.wg.Go(func() { _ = l.http.Serve(hl) })
	return l, nil
}

// Close stops both listeners and waits for their goroutines.
func (l *Listeners) Close() {
	l.grpc.Stop()
	_ = l.http.Close()
	l.wg.Wait()
}
