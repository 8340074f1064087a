// Package governance enforces fabro tokens' budgets, rate limits and model
// lists in the LLM gateway, and attributes spend to tokens, principals and
// models.
//
// Every check is local: counters live in memory, so a call pays a map
// lookup under a mutex, not a network round trip. With a NATS JetStream
// key-value store the counters are also shared and durable: each replica
// adds its local increments to the stored values by compare-and-set
// (Update with the revision read) every flush interval, and watches the
// buckets for the other replicas' additions. A replica therefore sees
// another's spend and requests within about one flush interval; within one
// replica, every limit is exact. Concurrent calls are counted per replica.
package governance

import (
	"context"
	"encoding/base64"
	"errors"
	"fmt"
	"log/slog"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/nats-io/nats.go/jetstream"
	"go.opentelemetry.io/otel"
	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/metric"

	"github.com/fabro-sh/fabro-go/platform/auth"
)

// The key-value buckets: spend is kept (a month's history and more), the
// per-minute rate windows expire on their own.
const (
	SpendBucket = "fabro_llm_spend"
	RateBucket  = "fabro_llm_rate"
)

// DefaultFlushInterval is how often local increments are written to NATS.
const DefaultFlushInterval = 100 * time.Millisecond

// Subject is who makes a call: the token and its principal, with the
// token's policy (nil: no limits, spend is still counted) and the
// principal's (nil: none), which bounds every token of that principal
// together.
type Subject struct {
	TokenID         string
	Principal       string
	Policy          *auth.Policy
	PrincipalPolicy *auth.Policy
}

// scope is one policy a call is counted against: the token's or its
// principal's. Its counters' keys start with its kind.
type scope struct {
	who    string // in refusals: "this token", "principal user:alice"
	kind   string // "tok" or "user"
	id     string
	policy *auth.Policy
}

func (sc scope) rpmKey(m time.Time) string { return rateKey(sc.rateKind("rpm"), sc.id, m) }
func (sc scope) tpmKey(m time.Time) string { return rateKey(sc.rateKind("tpm"), sc.id, m) }

// rateKind keeps a token's keys as they were before principal limits.
func (sc scope) rateKind(k string) string {
	if sc.kind == "tok" {
		return k
	}
	return sc.kind + "-" + k
}

func (sc scope) activeKey() string { return sc.kind + ":" + sc.id }

// scopes are the policies s is counted against, in buf (no allocation per
// call); a nil policy is none.
func (s Subject) scopes(buf *[2]scope) []scope {
	out := buf[:0]
	if s.Policy != nil {
		out = append(out, scope{"this token", "tok", s.TokenID, s.Policy})
	}
	if s.PrincipalPolicy != nil && s.Principal != "" {
		out = append(out, scope{"principal " + s.Principal, "user", s.Principal, s.PrincipalPolicy})
	}
	return out
}

// Reason says why a call was refused.
type Reason string

// The refusals.
const (
	ReasonModel       Reason = "MODEL_NOT_ALLOWED"
	ReasonBudget      Reason = "BUDGET_EXHAUSTED"
	ReasonRequests    Reason = "REQUEST_RATE_LIMITED"
	ReasonTokens      Reason = "TOKEN_RATE_LIMITED"
	ReasonConcurrency Reason = "CONCURRENCY_LIMITED"
)

// Refusal is a call the policy does not allow.
type Refusal struct {
	Reason     Reason
	Message    string
	RetryAfter time.Duration // 0 for ReasonModel: waiting does not help
}

func (r *Refusal) Error() string { return r.Message }

// Options configure an Engine.
type Options struct {
	// KV is the JetStream context holding the buckets; nil keeps the state
	// in memory only (lost on restart, not shared).
	JetStream jetstream.JetStream
	// FlushInterval; 0 means DefaultFlushInterval.
	FlushInterval time.Duration
	// Now is the clock (tests); nil means time.Now.
	Now    func() time.Time
	Meter  metric.MeterProvider
	Logger *slog.Logger
}

// Engine holds the counters. Its methods are safe for concurrent use.
type Engine struct {
	now    func() time.Time
	logger *slog.Logger
	spend  jetstream.KeyValue // nil: memory only
	rate   jetstream.KeyValue
	every  time.Duration

	mu       sync.Mutex
	counters map[string]*counter
	active   map[string]int32 // calls in progress per token

	spent    metric.Int64Counter
	refused  metric.Int64Counter
	warnings metric.Int64Counter

	stop chan struct{}
	done sync.WaitGroup
}

// counter is one stored value: what the store had (shared, at rev), what
// this replica added since and has not yet written (pending), and what it
// is writing now (inflight).
type counter struct {
	kv       jetstream.KeyValue
	shared   int64
	rev      uint64
	pending  int64
	inflight int64
	flushing bool
	// stash is the newest value the watcher saw while a write was in
	// flight, applied after it.
	stashVal int64
	stashRev uint64
	expires  time.Time // local garbage collection
}

func (c *counter) value() int64 { return c.shared + c.pending + c.inflight }

// New returns an engine; with o.JetStream it creates (or opens) the buckets
// and loads their values before returning.
func New(ctx context.Context, o Options) (*Engine, error) {
	e := &Engine{now: o.Now, logger: o.Logger, every: o.FlushInterval, counters: map[string]*counter{},
		active: map[string]int32{}, stop: make(chan struct{})}
	if e.now == nil {
		e.now = time.Now
	}
	if e.logger == nil {
		e.logger = slog.New(slog.DiscardHandler)
	}
	if e.every <= 0 {
		e.every = DefaultFlushInterval
	}
	mp := o.Meter
	if mp == nil {
		mp = otel.GetMeterProvider()
	}
	m := mp.Meter("github.com/fabro-sh/fabro-go/services/llmgateway/governance")
	e.spent, _ = m.Int64Counter("fabro.llm.spend", metric.WithUnit("{usd_micro}"),
		metric.WithDescription("Spend of model calls in millionths of a US dollar, by token, principal and model"))
	e.refused, _ = m.Int64Counter("fabro.llm.governance.refusals", metric.WithUnit("{call}"),
		metric.WithDescription("Calls refused by a token's policy, by reason"))
	e.warnings, _ = m.Int64Counter("fabro.llm.budget.warnings", metric.WithUnit("{event}"),
		metric.WithDescription("Budgets crossing their warning threshold or amount, by token and level"))
	if o.JetStream == nil {
		return e, nil
	}
	var err error
	if e.spend, err = o.JetStream.CreateOrUpdateKeyValue(ctx, jetstream.KeyValueConfig{Bucket: SpendBucket, History: 1,
		Description: "fabro LLM gateway: spend per token, principal and model per period"}); err != nil {
		return nil, fmt.Errorf("governance: spend bucket: %w", err)
	}
	if e.rate, err = o.JetStream.CreateOrUpdateKeyValue(ctx, jetstream.KeyValueConfig{Bucket: RateBucket, History: 1, TTL: 3 * time.Minute,
		Description: "fabro LLM gateway: requests and tokens per token per minute"}); err != nil {
		return nil, fmt.Errorf("governance: rate bucket: %w", err)
	}
	for _, kv := range []jetstream.KeyValue{e.spend, e.rate} {
		w, err := kv.WatchAll(ctx, jetstream.IgnoreDeletes())
		if err != nil {
			return nil, fmt.Errorf("governance: watch %s: %w", kv.Bucket(), err)
		}
		// The initial values end with a nil entry: wait for it, so a
		// restarted replica refuses a spent token from its first call.
		if err := e.loadInitial(ctx, kv, w); err != nil {
			w.Stop()
			return nil, err
		}
		e.done.Add(1)
		go e.watch(kv, w)
	}
	e.done.Add(1)
	go e.flushLoop()
	return e, nil
}

func (e *Engine) loadInitial(ctx context.Context, kv jetstream.KeyValue, w jetstream.KeyWatcher) error {
	for {
		select {
		case ent, ok := <-w.Updates():
			if !ok {
				return fmt.Errorf("governance: watch %s ended", kv.Bucket())
			}
			if ent == nil {
				return nil
			}
			e.observe(kv, ent)
		case <-ctx.Done():
			return fmt.Errorf("governance: load %s: %w", kv.Bucket(), ctx.Err())
		}
	}
}

func (e *Engine) watch(kv jetstream.KeyValue, w jetstream.KeyWatcher) {
	defer e.done.Done()
	defer w.Stop()
	for {
		select {
		case ent, ok := <-w.Updates():
			if !ok {
				return
			}
			if ent != nil {
				e.observe(kv, ent)
			}
		case <-e.stop:
			return
		}
	}
}

// observe applies a stored value seen by the watcher.
func (e *Engine) observe(kv jetstream.KeyValue, ent jetstream.KeyValueEntry) {
	v, err := strconv.ParseInt(string(ent.Value()), 10, 64)
	if err != nil {
		e.logger.Warn("governance: ignoring a malformed stored counter", "bucket", kv.Bucket(), "key", ent.Key())
		return
	}
	e.mu.Lock()
	defer e.mu.Unlock()
	c := e.counterLocked(kv, ent.Key(), time.Time{})
	switch {
	case c.flushing:
		if ent.Revision() > c.stashRev {
			c.stashVal, c.stashRev = v, ent.Revision()
		}
	case ent.Revision() > c.rev:
		c.shared, c.rev = v, ent.Revision()
	}
}

// counterLocked returns the counter of key, creating it; e.mu is held.
func (e *Engine) counterLocked(kv jetstream.KeyValue, key string, expires time.Time) *counter {
	c := e.counters[key]
	if c == nil {
		c = &counter{kv: kv}
		e.counters[key] = c
	}
	if expires.After(c.expires) {
		c.expires = expires
	}
	return c
}

// Close writes what is pending and stops the watchers.
func (e *Engine) Close() error {
	if e.spend == nil {
		return nil
	}
	select {
	case <-e.stop:
		return nil
	default:
	}
	close(e.stop)
	e.done.Wait()
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	return e.Flush(ctx)
}

func (e *Engine) flushLoop() {
	defer e.done.Done()
	t := time.NewTicker(e.every)
	defer t.Stop()
	for {
		select {
		case <-t.C:
			ctx, cancel := context.WithTimeout(context.Background(), 10*e.every+time.Second)
			if err := e.Flush(ctx); err != nil {
				e.logger.Warn("governance: counters not written to NATS yet (enforcement goes on locally)", "error", err)
			}
			cancel()
			e.collect()
		case <-e.stop:
			return
		}
	}
}

// Flush writes every pending increment to its bucket by compare-and-set.
func (e *Engine) Flush(ctx context.Context) error {
	if e.spend == nil {
		return nil
	}
	type job struct {
		key   string
		c     *counter
		delta int64
	}
	var jobs []job
	e.mu.Lock()
	for k, c := range e.counters {
		if c.pending != 0 && !c.flushing {
			c.flushing, c.inflight, c.pending = true, c.pending, 0
			c.stashRev = 0
			jobs = append(jobs, job{k, c, c.inflight})
		}
	}
	e.mu.Unlock()
	var errs []error
	for _, j := range jobs {
		val, rev, err := add(ctx, j.c.kv, j.key, j.delta)
		e.mu.Lock()
		c := j.c
		c.flushing = false
		if err != nil {
			c.pending += c.inflight
			errs = append(errs, err)
		} else if rev > c.rev {
			c.shared, c.rev = val, rev
		}
		c.inflight = 0
		if c.stashRev > c.rev {
			c.shared, c.rev = c.stashVal, c.stashRev
		}
		e.mu.Unlock()
	}
	return errors.Join(errs...)
}

// add adds delta to the stored value of key by compare-and-set, and
// returns the value written and its revision.
func add(ctx context.Context, kv jetstream.KeyValue, key string, delta int64) (int64, uint64, error) {
	for try := 0; try < 100; try++ {
		ent, err := kv.Get(ctx, key)
		if errors.Is(err, jetstream.ErrKeyNotFound) {
			v := delta
			rev, err := kv.Create(ctx, key, []byte(strconv.FormatInt(v, 10)))
			if errors.Is(err, jetstream.ErrKeyExists) {
				continue // another replica created it first
			}
			return v, rev, err
		}
		if err != nil {
			return 0, 0, err
		}
		cur, err := strconv.ParseInt(string(ent.Value()), 10, 64)
		if err != nil {
			cur = 0 // a malformed value is replaced, not kept forever
		}
		v := cur + delta
		rev, err := kv.Update(ctx, key, []byte(strconv.FormatInt(v, 10)), ent.Revision())
		if err == nil {
			return v, rev, nil
		}
		var apiErr *jetstream.APIError
		if !errors.As(err, &apiErr) || apiErr.ErrorCode != jetstream.JSErrCodeStreamWrongLastSequence {
			if !errors.Is(err, jetstream.ErrKeyExists) {
				return 0, 0, err
			}
		}
		// Another replica wrote between the read and the write: again.
	}
	return 0, 0, fmt.Errorf("governance: %s: too much contention", key)
}

// collect forgets counters of windows and periods that are over.
func (e *Engine) collect() {
	now := e.now()
	e.mu.Lock()
	defer e.mu.Unlock()
	for k, c := range e.counters {
		if !c.expires.IsZero() && now.After(c.expires) && c.pending == 0 && !c.flushing {
			delete(e.counters, k)
		}
	}
}

// Ticket is an admitted call; Done reports its usage.
type Ticket struct {
	e     *Engine
	s     Subject
	start time.Time
	once  sync.Once
}

// Check admits a call of subject s to the canonical model, or refuses it.
// It counts the call against the requests-per-minute limits and the
// concurrency limits of the token and of its principal; the caller must
// call Done on the ticket.
func (e *Engine) Check(ctx context.Context, s Subject, model string) (*Ticket, error) {
	var buf [2]scope
	scopes := s.scopes(&buf)
	limited := false
	for _, sc := range scopes {
		if p := sc.policy; !p.AllowsModel(model) {
			return nil, e.refuse(ctx, s, &Refusal{Reason: ReasonModel,
				Message: fmt.Sprintf("%s may not call model %q (its policy allows %s)", sc.who, model, strings.Join(p.Models, ", "))})
		}
		limited = limited || sc.policy.Limited()
	}
	now := e.now()
	tk := &Ticket{e: e, s: s, start: now}
	if !limited {
		return tk, nil
	}
	minute := now.Truncate(time.Minute)
	nextMinute := minute.Add(time.Minute)
	e.mu.Lock()
	// Every scope is checked before any is counted: a call refused by its
	// principal's limit takes nothing from its token's.
	rpms := make([]*counter, 0, len(scopes))
	for _, sc := range scopes {
		p := sc.policy
		if b := p.Budget; b != nil && !b.Soft {
			start, end := b.Period.Bounds(now)
			c := e.counterLocked(e.spend, spendKey(sc.kind, sc.id, b.Period, start), end)
			if c.value() >= b.USDMicros {
				e.mu.Unlock()
				return nil, e.refuse(ctx, s, &Refusal{Reason: ReasonBudget, RetryAfter: end.Sub(now),
					Message: fmt.Sprintf("the budget of %s, %s, is spent; it renews at %s", sc.who, b, end.Format(time.RFC3339))})
			}
		}
		if p.TokensPerMinute > 0 {
			c := e.counterLocked(e.rate, sc.tpmKey(minute), nextMinute)
			if c.value() >= p.TokensPerMinute {
				e.mu.Unlock()
				return nil, e.refuse(ctx, s, &Refusal{Reason: ReasonTokens, RetryAfter: nextMinute.Sub(now),
					Message: fmt.Sprintf("%s used its %d tokens per minute", sc.who, p.TokensPerMinute)})
			}
		}
		if p.RequestsPerMinute > 0 {
			c := e.counterLocked(e.rate, sc.rpmKey(minute), nextMinute)
			if c.value() >= int64(p.RequestsPerMinute) {
				e.mu.Unlock()
				return nil, e.refuse(ctx, s, &Refusal{Reason: ReasonRequests, RetryAfter: nextMinute.Sub(now),
					Message: fmt.Sprintf("%s made its %d requests per minute", sc.who, p.RequestsPerMinute)})
			}
			rpms = append(rpms, c)
		}
		if p.MaxConcurrent > 0 && e.active[sc.activeKey()] >= p.MaxConcurrent {
			e.mu.Unlock()
			return nil, e.refuse(ctx, s, &Refusal{Reason: ReasonConcurrency, RetryAfter: time.Second,
				Message: fmt.Sprintf("%s has its %d calls in progress", sc.who, p.MaxConcurrent)})
		}
	}
	for _, sc := range scopes {
		if sc.policy.MaxConcurrent > 0 {
			e.active[sc.activeKey()]++
		}
	}
	for _, c := range rpms {
		c.pending++
	}
	e.mu.Unlock()
	return tk, nil
}

func (e *Engine) refuse(ctx context.Context, s Subject, r *Refusal) error {
	e.refused.Add(ctx, 1, metric.WithAttributes(attribute.String("reason", string(r.Reason)), attribute.String("token_id", s.TokenID)))
	return r
}

// Done reconciles the call with what it actually used: tokens counted
// against the tokens-per-minute limit, cost (USD micros) against the budget
// and in the spend of the token, its principal and the model. Calls after
// the first do nothing.
func (t *Ticket) Done(ctx context.Context, tokens, costMicros int64, model string) {
	if t == nil {
		return
	}
	t.once.Do(func() { t.e.done1(ctx, t, tokens, costMicros, model) })
}

func (e *Engine) done1(ctx context.Context, t *Ticket, tokens, cost int64, model string) {
	s, now := t.s, e.now()
	type crossing struct {
		who  string
		b    *auth.Budget
		over bool
	}
	var crossed []crossing
	var buf [2]scope
	scopes := s.scopes(&buf)
	e.mu.Lock()
	m := t.start.Truncate(time.Minute)
	for _, sc := range scopes {
		p := sc.policy
		if p.MaxConcurrent > 0 {
			k := sc.activeKey()
			if e.active[k]--; e.active[k] <= 0 {
				delete(e.active, k)
			}
		}
		if p.TokensPerMinute > 0 && tokens > 0 {
			// Counted in the minute the call started, which its check saw.
			e.counterLocked(e.rate, sc.tpmKey(m), m.Add(time.Minute)).pending += tokens
		}
	}
	if cost > 0 {
		// The spend of the token (in its budget's period, else the month),
		// of the principal (the month, and its budget's period) and of the
		// model (the month).
		ms, me := auth.PeriodMonth.Bounds(now)
		add := func(kind, id string, period auth.Period) (before, after int64) {
			start, end := period.Bounds(now)
			c := e.counterLocked(e.spend, spendKey(kind, id, period, start), end)
			before = c.value()
			c.pending += cost
			return before, c.value()
		}
		tokMonth, userMonth := false, false // the month's spend already added
		for _, sc := range scopes {
			if b := sc.policy.Budget; b != nil {
				before, after := add(sc.kind, sc.id, b.Period)
				if b.Period == auth.PeriodMonth {
					tokMonth, userMonth = tokMonth || sc.kind == "tok", userMonth || sc.kind == "user"
				}
				switch {
				case before < b.USDMicros && after >= b.USDMicros:
					crossed = append(crossed, crossing{sc.who, b, true})
				case before < b.Warn() && after >= b.Warn():
					crossed = append(crossed, crossing{sc.who, b, false})
				}
			}
		}
		if !tokMonth && (s.Policy == nil || s.Policy.Budget == nil) {
			add("tok", s.TokenID, auth.PeriodMonth)
		}
		if s.Principal != "" && !userMonth {
			add("user", s.Principal, auth.PeriodMonth)
		}
		if model != "" {
			e.counterLocked(e.spend, spendKey("model", model, auth.PeriodMonth, ms), me).pending += cost
		}
	}
	e.mu.Unlock()
	if cost > 0 {
		e.spent.Add(ctx, cost, metric.WithAttributes(attribute.String("token_id", s.TokenID),
			attribute.String("principal", s.Principal), attribute.String("model", model)))
	}
	for _, c := range crossed {
		level := "warning"
		if c.over {
			level = "exceeded"
		}
		e.warnings.Add(ctx, 1, metric.WithAttributes(attribute.String("token_id", s.TokenID), attribute.String("level", level)))
		e.logger.WarnContext(ctx, "budget "+level, "of", c.who, "token_id", s.TokenID, "principal", s.Principal,
			"budget", c.b.String(), "soft", c.b.Soft)
	}
}

// Spend is what the token of id has spent in the period holding now
// (USD micros), as this replica knows it.
func (e *Engine) Spend(kind, name string, period auth.Period) int64 {
	start, end := period.Bounds(e.now())
	e.mu.Lock()
	defer e.mu.Unlock()
	return e.counterLocked(e.spend, spendKey(kind, name, period, start), end).value()
}

// Usage is a token's state for rate-limit headers.
type Usage struct {
	RequestsLimit, RequestsRemaining int64
	TokensLimit, TokensRemaining     int64
	Reset                            time.Time // the end of the current minute
}

// RateUsage returns s's per-minute limits and what remains of them: of
// the token's and its principal's, the one with less left; ok is false
// when neither policy sets any.
func (e *Engine) RateUsage(s Subject) (u Usage, ok bool) {
	now := e.now()
	minute := now.Truncate(time.Minute)
	u.Reset = minute.Add(time.Minute)
	e.mu.Lock()
	defer e.mu.Unlock()
	var buf [2]scope
	for _, sc := range s.scopes(&buf) {
		p := sc.policy
		if p.RequestsPerMinute > 0 {
			limit := int64(p.RequestsPerMinute)
			left := max(0, limit-e.counterLocked(e.rate, sc.rpmKey(minute), u.Reset).value())
			if u.RequestsLimit == 0 || left < u.RequestsRemaining {
				u.RequestsLimit, u.RequestsRemaining = limit, left
			}
			ok = true
		}
		if p.TokensPerMinute > 0 {
			left := max(0, p.TokensPerMinute-e.counterLocked(e.rate, sc.tpmKey(minute), u.Reset).value())
			if u.TokensLimit == 0 || left < u.TokensRemaining {
				u.TokensLimit, u.TokensRemaining = p.TokensPerMinute, left
			}
			ok = true
		}
	}
	return u, ok
}

// Key names: characters a NATS key allows. Names that might hold others
// (principals, models) are base64url-encoded.
func spendKey(kind, name string, period auth.Period, start time.Time) string {
	return "spend." + kind + "." + base64.RawURLEncoding.EncodeToString([]byte(name)) + "." + string(period) + "." + start.Format("20060102")
}

func rateKey(kind, id string, minute time.Time) string {
	return kind + "." + base64.RawURLEncoding.EncodeToString([]byte(id)) + "." + strconv.FormatInt(minute.Unix()/60, 10)
}
