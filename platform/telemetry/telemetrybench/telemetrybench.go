// Package telemetrybench measures what telemetry adds to a call: the same
// call under several telemetry setups, interleaved call by call in one
// run, reported as ratios to telemetry off.
package telemetrybench

import (
	"context"
	"sort"
	"testing"
	"time"

	"github.com/fabro-sh/fabro-go/platform/telemetry"
	"github.com/fabro-sh/fabro-go/platform/telemetry/otlpsink"
)

// Mode is one telemetry setup.
type Mode struct {
	Name string
	Env  map[string]string
}

// Modes are: off (OTEL_SDK_DISABLED), unset (no OTEL_* at all: no
// exporter, Prometheus only), sampled100 (every span exported over
// OTLP/gRPC to a receiver in this process) and sampled0 (the exporter set,
// no span sampled).
func Modes(sinkGRPCAddr string) []Mode {
	ep := "http://" + sinkGRPCAddr
	return []Mode{
		{"off", map[string]string{"OTEL_SDK_DISABLED": "true"}},
		{"unset", map[string]string{}},
		{"sampled100", map[string]string{"OTEL_EXPORTER_OTLP_ENDPOINT": ep, "OTEL_EXPORTER_OTLP_PROTOCOL": "grpc", "OTEL_TRACES_SAMPLER": "always_on"}},
		{"sampled0", map[string]string{"OTEL_EXPORTER_OTLP_ENDPOINT": ep, "OTEL_EXPORTER_OTLP_PROTOCOL": "grpc", "OTEL_TRACES_SAMPLER": "traceidratio", "OTEL_TRACES_SAMPLER_ARG": "0"}},
	}
}

// Run builds, for each mode in turn, the telemetry and then the system
// under test (build must create its servers and clients after the setup:
// they take the global providers when made), and times call under every
// mode, interleaved, b.N times each. It reports each mode's median and
// mean per call and their ratios to "off".
func Run(b *testing.B, build func(b *testing.B) (call func(ctx context.Context) error)) {
	sink, err := otlpsink.Listen(otlpsink.New(1000, nil).WithoutRaw(), "127.0.0.1:0", "127.0.0.1:0")
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(sink.Close)
	modes := Modes(sink.GRPCAddr)
	calls := make([]func(context.Context) error, len(modes))
	for i, m := range modes {
		env := m.Env
		tel, err := telemetry.Setup(context.Background(), telemetry.Config{ServiceName: "bench",
			LookupEnv: func(k string) (string, bool) { v, ok := env[k]; return v, ok }})
		if err != nil {
			b.Fatal(err)
		}
		b.Cleanup(func() { _ = tel.Shutdown(context.Background()) })
		calls[i] = build(b)
	}
	ctx := context.Background()
	for _, c := range calls { // warm up connections and pools
		for range 50 {
			if err := c(ctx); err != nil {
				b.Fatal(err)
			}
		}
	}
	samples := make([][]time.Duration, len(modes))
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		for j := range modes {
			k := (i + j) % len(modes) // rotate the order
			start := time.Now()
			if err := calls[k](ctx); err != nil {
				b.Fatal(err)
			}
			samples[k] = append(samples[k], time.Since(start))
		}
	}
	b.StopTimer()
	med := make([]float64, len(modes))
	mean := make([]float64, len(modes))
	for k, s := range samples {
		var sum time.Duration
		for _, d := range s {
			sum += d
		}
		sort.Slice(s, func(a, c int) bool { return s[a] < s[c] })
		med[k] = float64(s[len(s)/2].Nanoseconds())
		mean[k] = float64(sum.Nanoseconds()) / float64(len(s))
	}
	for k, m := range modes {
		b.ReportMetric(med[k]/1e3, m.Name+"-median-us")
		if k > 0 {
			b.ReportMetric(med[k]/med[0], m.Name+"/off-median")
			b.ReportMetric(mean[k]/mean[0], m.Name+"/off-mean")
		}
	}
}
