package agent

import (
	"errors"
	"strconv"
	"time"

	"google.golang.org/grpc/codes"

	"github.com/fabro-sh/fabro-go/platform/grpcerr"
	"github.com/fabro-sh/fabro-go/services/agent/internal/bus"
)

// eventLogStatus is the status of a call whose session's event log
// failed: UNAVAILABLE naming NATS after an outage longer than the bound,
// the context's end when the caller went away, INTERNAL otherwise.
func eventLogStatus(err error) error {
	if errors.Is(err, bus.ErrNATSUnavailable) {
		// No RetryInfo: the session ended; ResumeSession, not a retry,
		// goes on.
		return domain.New(codes.Unavailable, reasonNATSUnavailable, "the session ended: "+err.Error(), grpcerr.Meta("service", "nats"))
	}
	if e := domain.FromContext(err); e != nil {
		return e
	}
	return domain.New(codes.Internal, reasonEventLog, "the durable event log failed; the session ended: "+err.Error())
}

// replayStatus is the status of a failed replay: OUT_OF_RANGE for a
// sequence older than the stream's retention, as the contract says.
func replayStatus(err error) error {
	var exp *bus.ExpiredError
	if errors.As(err, &exp) {
		return domain.New(codes.OutOfRange, reasonEventsExpired, exp.Error(), grpcerr.Meta(
			"field", "from_sequence",
			"from_sequence", strconv.FormatUint(exp.From, 10),
			"oldest_retained_sequence", strconv.FormatUint(exp.Oldest, 10)),
			grpcerr.Field("from_sequence", exp.Error()))
	}
	if e := domain.FromContext(err); e != nil {
		return e
	}
	if errors.Is(err, bus.ErrNATSUnavailable) {
		return domain.New(codes.Unavailable, reasonNATSUnavailable, "replay events: "+err.Error(), grpcerr.Meta("service", "nats"), grpcerr.RetryAfter(5*time.Second))
	}
	return domain.New(codes.Internal, reasonEventLog, "replay events: "+err.Error())
}
