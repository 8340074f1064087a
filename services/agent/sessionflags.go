package agent

import (
	"flag"
	"strconv"
	"time"
)

// SessionLimits bounds the sessions a service keeps open.
type SessionLimits struct {
	// IdleTTL closes a root session that stayed IDLE (its whole tree idle)
	// this long after its last event; it can be resumed. 0: never.
	IdleTTL time.Duration
	// MaxPerPrincipal caps the open root sessions of one principal; a
	// CreateSession or ResumeSession beyond it gets RESOURCE_EXHAUSTED
	// (SESSION_LIMIT). 0: no cap.
	MaxPerPrincipal int
	// MaxReplaysPerPrincipal caps the StreamEvents replays of one principal
	// reading the stream at once (each holds a JetStream consumer while it
	// reads); one beyond it gets RESOURCE_EXHAUSTED (REPLAY_LIMIT), and
	// other principals are not affected. 0: DefaultMaxReplaysPerPrincipal;
	// negative: no cap.
	MaxReplaysPerPrincipal int
	// ClosedRetention is how long a closed root session (and its
	// subagents) is kept after its last update: past it, its events are
	// purged from the stream and its records deleted, as DeleteSession
	// does. 0: kept until deleted.
	ClosedRetention time.Duration
}

// Defaults of the session flags.
const (
	DefaultIdleTTL         = 24 * time.Hour
	DefaultMaxPerPrincipal = 64
	// DefaultMaxReplaysPerPrincipal keeps any one caller far below the
	// stream's consumer limit (nats-server's default is 1,000).
	DefaultMaxReplaysPerPrincipal = 32
)

// RegisterSessionFlags binds -agent-idle-ttl and
// -agent-max-sessions-per-principal (FABRO_AGENT_IDLE_TTL and
// FABRO_AGENT_MAX_SESSIONS_PER_PRINCIPAL with platform/envflag), with
// their defaults for zero fields.
func RegisterSessionFlags(fs *flag.FlagSet, c *SessionLimits) {
	if c.IdleTTL == 0 {
		c.IdleTTL = DefaultIdleTTL
	}
	if c.MaxPerPrincipal == 0 {
		c.MaxPerPrincipal = DefaultMaxPerPrincipal
	}
	fs.DurationVar(&c.IdleTTL, "agent-idle-ttl", c.IdleTTL, "close a session left idle this long (it can be resumed); 0: never")
	fs.IntVar(&c.MaxPerPrincipal, "agent-max-sessions-per-principal", c.MaxPerPrincipal, "most open root sessions per principal (RESOURCE_EXHAUSTED beyond); 0: no cap")
	fs.DurationVar(&c.ClosedRetention, "agent-closed-retention", c.ClosedRetention,
		"purge a closed session's events and record this long after it closed (SUSPENDED sessions are kept); 0: keep until deleted")
	fs.IntVar(&c.MaxReplaysPerPrincipal, "agent-max-replays-per-principal", c.MaxReplaysPerPrincipal,
		"most StreamEvents replays one principal runs at once (RESOURCE_EXHAUSTED beyond); 0: the default "+strconv.Itoa(DefaultMaxReplaysPerPrincipal)+"; negative: no cap")
}
