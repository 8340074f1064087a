package bus

import (
	"context"
	"fmt"
	"strconv"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"google.golang.org/protobuf/encoding/protojson"

	agentv1 "github.com/fabro-sh/fabro-go/gen/fabro/agent/v1"
)

// The envelope of every event message (README: "Agent events on NATS").
// Each message says how its data is encoded and which event it holds, so a
// subscriber in any language routes and decodes it without our code.
const (
	// HeaderContentType is the encoding of the message data: ContentTypeProtobuf
	// (the stream's subjects) or ContentTypeJSON (the JSON subjects).
	HeaderContentType = "Content-Type"
	// HeaderEventType is the event type, the snake_case name of the
	// AgentEvent oneof field set (tool_call_started), also the subject's
	// last token.
	HeaderEventType = "Fabro-Event-Type"
	// HeaderMessageType names the protobuf message the data holds.
	HeaderMessageType = "Fabro-Message-Type"

	ContentTypeProtobuf = "application/protobuf"
	// ContentTypeJSON is the protobuf JSON mapping (protojson) of AgentEvent.
	ContentTypeJSON = "application/json"

	// JSONSubjectPrefix is the second subject tree: every event again, as
	// JSON, on core NATS (live; not stored in the stream).
	JSONSubjectPrefix = "fabro.agent.v1.json.sessions."
	// AllJSONSubjects matches every JSON event message.
	AllJSONSubjects = JSONSubjectPrefix + ">"
)

var messageType = string((&agentv1.AgentEvent{}).ProtoReflect().Descriptor().FullName())

// JSONSubject is the JSON subject of one event type of one session.
func JSONSubject(sessionID, eventType string) string {
	return JSONSubjectPrefix + sessionID + ".events." + eventType
}

// jsonOptions are the protojson options of the JSON tree: field names as
// in the proto (snake_case, the REST gateway's choice too) and no
// defaults emitted, so a payload stays the size of what was set.
var jsonOptions = protojson.MarshalOptions{UseProtoNames: true}

// envelope sets the headers every message of one event carries.
func envelope(ctx context.Context, h nats.Header, contentType, eventType, msgID string) {
	h.Set(HeaderContentType, contentType)
	h.Set(HeaderEventType, eventType)
	h.Set(HeaderMessageType, messageType)
	h.Set(HeaderEventMsgID, msgID)
	injectTrace(ctx, h)
}

// chunkMsgs splits data into the messages of one event: one message when
// it fits size, else chunks with the Fabro-Chunk-* headers.
func chunkMsgs(ctx context.Context, subject, contentType, eventType, msgID, dedupID string, data []byte, size int) []*nats.Msg {
	if len(data) <= size {
		m := nats.NewMsg(subject)
		m.Data = data
		envelope(ctx, m.Header, contentType, eventType, msgID)
		m.Header.Set(jetstream.MsgIDHeader, dedupID)
		return []*nats.Msg{m}
	}
	count := (len(data) + size - 1) / size
	msgs := make([]*nats.Msg, 0, count)
	for i := range count {
		m := nats.NewMsg(subject)
		m.Data = data[i*size : min(len(data), (i+1)*size)]
		envelope(ctx, m.Header, contentType, eventType, msgID)
		m.Header.Set(jetstream.MsgIDHeader, dedupID+"#"+strconv.Itoa(i))
		m.Header.Set(HeaderChunkIndex, strconv.Itoa(i))
		m.Header.Set(HeaderChunkCount, strconv.Itoa(count))
		m.Header.Set(HeaderChunkTotal, strconv.Itoa(len(data)))
		msgs = append(msgs, m)
	}
	return msgs
}

// wantJSON reports whether the JSON copy of an event on subject is worth
// encoding: not when turned off, and, on the embedded server, not when no
// client subscribes to it (the server would drop it anyway). An external
// server's interest is not known here, so it always gets the copy.
func (b *Bus) wantJSON(subject string) bool {
	if b.wcfg.NoJSON {
		return false
	}
	if b.inproc != nil {
		return b.inproc.server().GlobalAccount().SubscriptionInterest(subject)
	}
	return true
}

// publishJSON sends the JSON copy of ev on core NATS. It is live only and
// best effort: during an outage it is dropped (the stream keeps the
// protobuf original), and a republish after an outage may send it again
// with the same Fabro-Event-Msg-Id.
func (b *Bus) publishJSON(ctx context.Context, ev *agentv1.AgentEvent, eventType, msgID string) error {
	subject := JSONSubject(ev.GetSessionId(), eventType)
	if !b.wantJSON(subject) {
		return nil
	}
	data, err := jsonOptions.Marshal(ev)
	if err != nil {
		return fmt.Errorf("bus: marshal event as JSON: %w: %w", ErrMarshal, err)
	}
	for _, m := range chunkMsgs(ctx, subject, ContentTypeJSON, eventType, msgID, msgID, data, b.chunkLimit()) {
		if err := b.nc.PublishMsg(m); err != nil {
			b.logger.DebugContext(ctx, "JSON event copy dropped", "subject", subject, "error", err)
			return nil
		}
	}
	return nil
}
