package agent

import (
	"errors"
	"strconv"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/fabro-sh/fabro-go/services/agent/internal/bus"
)

// eventLogStatus is the status of a call whose session's event log
// failed: UNAVAILABLE naming NATS after an outage longer than the bound,
// INTERNAL otherwise.
func eventLogStatus(err error) error {
	if errors.Is(err, bus.ErrNATSUnavailable) {
		return withInfo(codes.Unavailable, "the session ended: "+err.Error(), "NATS_UNAVAILABLE", nil)
	}
	return status.Error(codes.Internal, "the durable event log failed; the session ended: "+err.Error())
}

// replayStatus is the status of a failed replay: OUT_OF_RANGE for a
// sequence older than the stream's retention, as the contract says.
func replayStatus(err error) error {
	var exp *bus.ExpiredError
	if errors.As(err, &exp) {
		return withInfo(codes.OutOfRange, exp.Error(), "EVENTS_EXPIRED", map[string]string{
			"from_sequence":            strconv.FormatUint(exp.From, 10),
			"oldest_retained_sequence": strconv.FormatUint(exp.Oldest, 10),
		})
	}
	return status.Errorf(codes.Internal, "replay events: %v", err)
}
