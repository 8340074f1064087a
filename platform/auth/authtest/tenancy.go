package authtest

import (
	"bytes"
	"errors"
	"io"
	"strings"
	"sync"
	"testing"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/reflect/protoreflect"
)

// The tenancy suites' kit: every service's suite calls each method that
// names a resource as a non-owner, the owner and an admin, from the
// service descriptor, and checks a refusal is the NOT_FOUND of an unknown
// id. What they share is here.

// EveryMethod runs run for each method of svc that has a case, and fails
// the test for a method with neither a case nor an entry in unscoped (a
// method naming no resource, tested on its own): a new RPC cannot be left
// out of the suite. A nil case is a method listed but tested elsewhere.
func EveryMethod[C any](t *testing.T, svc protoreflect.ServiceDescriptor, cases map[string]C, unscoped map[string]bool, run func(t *testing.T, name string, c C)) {
	t.Helper()
	methods := svc.Methods()
	for i := range methods.Len() {
		name := string(methods.Get(i).Name())
		c, named := cases[name]
		if !named {
			if !unscoped[name] {
				t.Errorf("%s.%s has no tenancy case: add one, or list it as unscoped", svc.Name(), name)
			}
			continue
		}
		t.Run(name, func(t *testing.T) { run(t, name, c) })
	}
}

// RecvAll reads a server stream to its end: its first error, nil at EOF.
func RecvAll[T any](s grpc.ServerStreamingClient[T], err error) error {
	if err != nil {
		return err
	}
	for {
		if _, err := s.Recv(); err != nil {
			if errors.Is(err, io.EOF) {
				return nil
			}
			return err
		}
	}
}

// Reason is the ErrorInfo reason of err, "" without one.
func Reason(err error) string {
	for _, d := range status.Convert(err).Details() {
		if r, ok := d.(interface{ GetReason() string }); ok {
			return r.GetReason()
		}
	}
	return ""
}

// SameAsMissing reports whether err, a call on id, is the refusal missing
// got for the unknown id missingID: NOT_FOUND, the same reason, and the
// same message once the ids are swapped. It returns what was expected,
// for the failure message.
func SameAsMissing(err, missing error, missingID, id string) (bool, string) {
	want := strings.ReplaceAll(status.Convert(missing).Message(), missingID, id)
	ok := status.Code(err) == codes.NotFound && status.Code(missing) == codes.NotFound &&
		status.Convert(err).Message() == want && Reason(err) == Reason(missing)
	return ok, want + " (" + Reason(missing) + ")"
}

// Refused reports whether err is the refusal missing is (NOT_FOUND of
// the same reason): an owner's or admin's call must not be.
func Refused(err, missing error) bool {
	return status.Code(err) == codes.NotFound && Reason(err) == Reason(missing)
}

// LogBuffer is a log sink that servers' goroutines write to while a test
// reads it, for the audit lines.
type LogBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (l *LogBuffer) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.Write(p)
}

func (l *LogBuffer) String() string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.String()
}
