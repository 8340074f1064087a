package bus

import (
	"errors"
	"fmt"
	"strconv"
	"strings"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"google.golang.org/protobuf/proto"

	agentv1 "github.com/fabro-sh/fabro-go/gen/fabro/agent/v1"
)

// An event whose encoding is larger than the server's maximum payload is
// stored as consecutive chunk messages on the event's subject. Each chunk
// carries these headers besides the envelope (encoding.go); its Nats-Msg-Id
// is "<session_id>:<sequence>#<index>" so JetStream deduplicates every chunk
// of a republished event.
const (
	// HeaderChunkIndex is the chunk's index, from 0.
	HeaderChunkIndex = "Fabro-Chunk-Index"
	// HeaderChunkCount is how many chunks the event has.
	HeaderChunkCount = "Fabro-Chunk-Count"
	// HeaderChunkTotal is the size in bytes of the whole encoded event.
	HeaderChunkTotal = "Fabro-Chunk-Total"
	// HeaderEventMsgID is the event's own message id, "<session_id>:<sequence>",
	// on every message of the event (whole or chunk, either encoding).
	HeaderEventMsgID = "Fabro-Event-Msg-Id"

	// chunkHeadroom is left under the maximum payload for the headers.
	chunkHeadroom = 4 << 10
	// maxEventBytes bounds what a reader reassembles (a hostile header
	// could claim any total).
	maxEventBytes = 512 << 20
)

// chunkLimit is the largest encoded event published as one message.
func (b *Bus) chunkLimit() int {
	if b.wcfg.ChunkSize > 0 {
		return b.wcfg.ChunkSize
	}
	mp := int(b.nc.MaxPayload())
	if mp <= 2*chunkHeadroom {
		mp = 1 << 20 // unknown yet: the server's default limit
	}
	return mp - chunkHeadroom
}

// publishAll publishes the messages of one event, in order, and returns a
// future that resolves when every one is acknowledged or one fails.
func (b *Bus) publishAll(msgs []*nats.Msg) (jetstream.PubAckFuture, error) {
	fs := make([]jetstream.PubAckFuture, 0, len(msgs))
	for i, m := range msgs {
		f, err := b.js.PublishMsgAsync(m)
		if err != nil {
			if len(msgs) == 1 {
				return nil, fmt.Errorf("bus: publish %s: %w", m.Subject, err)
			}
			return nil, fmt.Errorf("bus: publish %s chunk %d/%d: %w", m.Subject, i, len(msgs), err)
		}
		fs = append(fs, f)
	}
	if len(fs) == 1 {
		return fs[0], nil
	}
	return joinFutures(fs), nil
}

// allFutures is the future of a chunked event.
type allFutures struct {
	last jetstream.PubAckFuture
	ok   chan *jetstream.PubAck
	err  chan error
}

// joinFutures waits (in a goroutine that ends when every future has
// resolved, each bounded by the ack timeout) for all of fs.
func joinFutures(fs []jetstream.PubAckFuture) jetstream.PubAckFuture {
	a := &allFutures{last: fs[len(fs)-1], ok: make(chan *jetstream.PubAck, 1), err: make(chan error, 1)}
	go func() {
		var ack *jetstream.PubAck
		for _, f := range fs {
			select {
			case ack = <-f.Ok():
			case err := <-f.Err():
				a.err <- err
				return
			}
		}
		a.ok <- ack
	}()
	return a
}

func (a *allFutures) Ok() <-chan *jetstream.PubAck { return a.ok }
func (a *allFutures) Err() <-chan error            { return a.err }
func (a *allFutures) Msg() *nats.Msg               { return a.last.Msg() }

// reassembler turns stored messages back into events, joining chunks. It
// keeps one partial event per session, as sessions' messages interleave.
type reassembler struct {
	parts map[string]*partial
}

type partial struct {
	id          string
	next, count int
	total       int
	buf         []byte
}

// errChunk is a chunk sequence that cannot be joined.
var errChunk = errors.New("malformed event chunk")

// add returns the event msg completes, nil while the event is incomplete.
// A chunk sequence whose beginning is gone (removed by the retention) is
// skipped.
func (r *reassembler) add(msg jetstream.Msg) (*agentv1.AgentEvent, error) {
	return r.addData(msg.Headers(), msg.Data())
}

func (r *reassembler) addData(h nats.Header, data []byte) (*agentv1.AgentEvent, error) {
	idx := h.Get(HeaderChunkIndex)
	if idx == "" {
		ev := &agentv1.AgentEvent{}
		if err := proto.Unmarshal(data, ev); err != nil {
			return nil, err
		}
		return ev, nil
	}
	i, err1 := strconv.Atoi(idx)
	count, err2 := strconv.Atoi(h.Get(HeaderChunkCount))
	total, err3 := strconv.Atoi(h.Get(HeaderChunkTotal))
	id := h.Get(HeaderEventMsgID)
	if err := errors.Join(err1, err2, err3); err != nil || i < 0 || count < 1 || i >= count || total < 0 || total > maxEventBytes {
		return nil, fmt.Errorf("%w %s: index %q count %q total %q", errChunk, id, idx, h.Get(HeaderChunkCount), h.Get(HeaderChunkTotal))
	}
	session, _, _ := strings.Cut(id, ":")
	if r.parts == nil {
		r.parts = map[string]*partial{}
	}
	p := r.parts[session]
	if i == 0 {
		// Room for a few chunks, growing with what arrives: a header's
		// claimed total reserves nothing its chunks do not bring.
		p = &partial{id: id, count: count, total: total, buf: make([]byte, 0, min(total, 4*len(data)))}
		r.parts[session] = p
	}
	if p == nil || p.id != id || p.next != i || p.count != count || p.total != total {
		delete(r.parts, session) // its beginning is gone
		return nil, nil
	}
	if len(p.buf)+len(data) > p.total {
		return nil, fmt.Errorf("%w %s: more than %d bytes", errChunk, id, p.total)
	}
	p.buf = append(p.buf, data...)
	p.next++
	if p.next < p.count {
		return nil, nil
	}
	delete(r.parts, session)
	if len(p.buf) != p.total {
		return nil, fmt.Errorf("%w %s: %d bytes, want %d", errChunk, id, len(p.buf), p.total)
	}
	ev := &agentv1.AgentEvent{}
	if err := proto.Unmarshal(p.buf, ev); err != nil {
		return nil, err
	}
	return ev, nil
}
