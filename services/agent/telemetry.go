package agent

import (
	"context"

	"go.opentelemetry.io/otel"
	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/metric"

	agentv1 "github.com/fabro-sh/fabro-go/gen/fabro/agent/v1"
)

// observeSessions reports the loaded sessions by state: active (a prompt
// running) or idle (open, waiting for a prompt).
func (s *Service) observeSessions() error {
	m := otel.Meter("github.com/fabro-sh/fabro-go/services/agent")
	g, err := m.Int64ObservableGauge("fabro.agent.sessions", metric.WithUnit("{session}"),
		metric.WithDescription("Open agent sessions in this process, by state (active: a prompt runs; idle: waiting)"))
	if err != nil {
		return err
	}
	reg, err := m.RegisterCallback(func(_ context.Context, o metric.Observer) error {
		s.mu.Lock()
		all := make([]*session, 0, len(s.sessions))
		for _, sess := range s.sessions {
			all = append(all, sess)
		}
		s.mu.Unlock()
		var active, idle int64
		for _, sess := range all {
			sess.mu.Lock()
			running, open := sess.running, sess.info.GetState() == agentv1.SessionState_SESSION_STATE_IDLE
			sess.mu.Unlock()
			switch {
			case running:
				active++
			case open:
				idle++
			}
		}
		o.ObserveInt64(g, active, metric.WithAttributes(attribute.String("state", "active")))
		o.ObserveInt64(g, idle, metric.WithAttributes(attribute.String("state", "idle")))
		return nil
	}, g)
	if err != nil {
		return err
	}
	s.closers = append(s.closers, func() error { return reg.Unregister() })
	return nil
}
