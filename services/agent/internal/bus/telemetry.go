package bus

import (
	"context"
	"sync"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"go.opentelemetry.io/otel"
	"go.opentelemetry.io/otel/metric"
)

const scope = "github.com/fabro-sh/fabro-go/services/agent/internal/bus"

// natsCarrier puts W3C trace context into NATS headers under their exact
// lowercase names (traceparent, tracestate, baggage).
type natsCarrier nats.Header

func (c natsCarrier) Get(key string) string {
	if v := c[key]; len(v) > 0 {
		return v[0]
	}
	return ""
}
func (c natsCarrier) Set(key, value string) { c[key] = []string{value} }
func (c natsCarrier) Keys() []string {
	out := make([]string, 0, len(c))
	for k := range c {
		out = append(out, k)
	}
	return out
}

func injectTrace(ctx context.Context, h nats.Header) {
	otel.GetTextMapPropagator().Inject(ctx, natsCarrier(h))
}

var (
	instrumentsOnce sync.Once
	publishLatency  metric.Float64Histogram
)

func recordPublish(at time.Time) {
	instrumentsOnce.Do(func() {
		publishLatency, _ = otel.Meter(scope).Float64Histogram("fabro.agent.event.publish.duration",
			metric.WithUnit("s"), metric.WithDescription("Time from publishing an agent event to its JetStream acknowledgement"))
	})
	publishLatency.Record(context.Background(), time.Since(at).Seconds())
}

// observeBacklog reports the publishes still awaiting JetStream's ack.
func observeBacklog(js jetstream.JetStream) (metric.Registration, error) {
	m := otel.Meter(scope)
	g, err := m.Int64ObservableGauge("fabro.agent.event.publish.backlog",
		metric.WithUnit("{event}"), metric.WithDescription("Agent events published and not yet acknowledged by NATS"))
	if err != nil {
		return nil, err
	}
	bytes, err := m.Int64ObservableGauge("fabro.agent.events.stream.bytes",
		metric.WithUnit("By"), metric.WithDescription("Bytes the agent events stream stores (bounded by -events-max-bytes)"))
	if err != nil {
		return nil, err
	}
	msgs, err := m.Int64ObservableGauge("fabro.agent.events.stream.messages",
		metric.WithUnit("{message}"), metric.WithDescription("Messages the agent events stream stores"))
	if err != nil {
		return nil, err
	}
	consumers, err := m.Int64ObservableGauge("fabro.agent.events.stream.consumers",
		metric.WithUnit("{consumer}"), metric.WithDescription("Consumers of the agent events stream (replays, subscribers' durables)"))
	if err != nil {
		return nil, err
	}
	return m.RegisterCallback(func(ctx context.Context, o metric.Observer) error {
		o.ObserveInt64(g, int64(js.PublishAsyncPending()))
		ctx, cancel := context.WithTimeout(ctx, RequestTimeout)
		defer cancel()
		if s, err := js.Stream(ctx, StreamName); err == nil { // unreachable NATS: no sample
			st := s.CachedInfo().State
			o.ObserveInt64(bytes, int64(st.Bytes))
			o.ObserveInt64(msgs, int64(st.Msgs))
			o.ObserveInt64(consumers, int64(st.Consumers))
		}
		return nil
	}, g, bytes, msgs, consumers)
}
