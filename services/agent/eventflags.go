package agent

import (
	"flag"
	"strconv"

	"github.com/fabro-sh/fabro-go/services/agent/internal/bus"
)

// registerEventFlags binds the event writer's and the stream's limits.
func registerEventFlags(fs *flag.FlagSet, c *bus.WriterConfig) {
	if c.OutageLimit == 0 {
		c.OutageLimit = bus.DefaultOutageLimit
	}
	if c.AckTimeout == 0 {
		c.AckTimeout = bus.DefaultAckTimeout
	}
	if c.MaxAge == 0 {
		c.MaxAge = bus.DefaultMaxAge
	}
	fs.DurationVar(&c.OutageLimit, "nats-outage-limit", c.OutageLimit, "how long a session waits for NATS to acknowledge its events before it ends with an error naming NATS")
	fs.DurationVar(&c.AckTimeout, "nats-ack-timeout", c.AckTimeout, "how long an event publish waits for its JetStream ack before it is published again (same message id)")
	fs.DurationVar(&c.MaxAge, "events-max-age", c.MaxAge, "the events stream's retention by age (negative: forever)")
	fs.Var(jsonFlag{&c.NoJSON}, "events-json", "also publish every event as JSON on fabro.agent.v1.json.sessions.> (core NATS, live; the embedded server skips it while no one subscribes)")
	if c.MaxBytes == 0 {
		c.MaxBytes = bus.DefaultMaxBytes
	}
	fs.Int64Var(&c.MaxBytes, "events-max-bytes", c.MaxBytes, "the events stream's retention by size in bytes, oldest dropped first (negative: unlimited)")
}

// jsonFlag is -events-json, true by default: the inverse of NoJSON.
type jsonFlag struct{ off *bool }

func (f jsonFlag) String() string {
	if f.off == nil || !*f.off {
		return "true"
	}
	return "false"
}

func (f jsonFlag) Set(s string) error {
	on, err := strconv.ParseBool(s)
	if err != nil {
		return err
	}
	*f.off = !on
	return nil
}

func (jsonFlag) IsBoolFlag() bool { return true }
