package bus

import (
	"errors"
	"strconv"
	"testing"

	"github.com/nats-io/nats.go"
	"google.golang.org/protobuf/proto"
)

func chunkHeader(id string, i, count, total int) nats.Header {
	h := nats.Header{}
	h.Set(HeaderEventMsgID, id)
	h.Set(HeaderChunkIndex, strconv.Itoa(i))
	h.Set(HeaderChunkCount, strconv.Itoa(count))
	h.Set(HeaderChunkTotal, strconv.Itoa(total))
	return h
}

// TestReassemblerBadChunks feeds hostile or incomplete chunk sequences:
// malformed headers are errors, a run missing its start is skipped, and
// nothing grows past the declared total.
func TestReassemblerBadChunks(t *testing.T) {
	data, err := proto.Marshal(text("hello, chunked world"))
	if err != nil {
		t.Fatal(err)
	}
	half := len(data) / 2
	type part struct {
		h    nats.Header
		data []byte
	}
	for _, tc := range []struct {
		name    string
		parts   []part
		wantErr bool
		whole   bool // the last part completes the event
	}{
		{"whole in two", []part{{chunkHeader("s:1", 0, 2, len(data)), data[:half]}, {chunkHeader("s:1", 1, 2, len(data)), data[half:]}}, false, true},
		{"start removed", []part{{chunkHeader("s:1", 1, 2, len(data)), data[half:]}}, false, false},
		{"index past count", []part{{chunkHeader("s:1", 2, 2, len(data)), data}}, true, false},
		{"negative total", []part{{chunkHeader("s:1", 0, 2, -1), data}}, true, false},
		{"huge total", []part{{chunkHeader("s:1", 0, 2, maxEventBytes+1), data}}, true, false},
		{"more than total", []part{{chunkHeader("s:1", 0, 2, half), data}}, true, false},
		{"short of total", []part{{chunkHeader("s:1", 0, 1, len(data)+1), data}}, true, false},
		{"another event's chunk", []part{{chunkHeader("s:1", 0, 2, len(data)), data[:half]}, {chunkHeader("s:2", 1, 2, len(data)), data[half:]}}, false, false},
		{"not a number", []part{{nats.Header{HeaderChunkIndex: {"x"}, HeaderChunkCount: {"2"}, HeaderChunkTotal: {"3"}}, data}}, true, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var r reassembler
			var last error
			var ev any
			for _, p := range tc.parts {
				e, err := r.addData(p.h, p.data)
				if err != nil {
					last = err
					break
				}
				if e != nil {
					ev = e
				}
			}
			if (last != nil) != tc.wantErr || last != nil && !errors.Is(last, errChunk) {
				t.Fatalf("error %v, want error %v", last, tc.wantErr)
			}
			if (ev != nil) != tc.whole {
				t.Errorf("event %v, want whole %v", ev, tc.whole)
			}
		})
	}
}

// TestReassemblerReservesWhatArrives: a first chunk claiming the largest
// total reserves room for what chunks bring, not for the claim.
func TestReassemblerReservesWhatArrives(t *testing.T) {
	var r reassembler
	if _, err := r.addData(chunkHeader("s:1", 0, 1000, maxEventBytes), make([]byte, 10)); err != nil {
		t.Fatal(err)
	}
	if c := cap(r.parts["s"].buf); c > 1<<10 {
		t.Fatalf("reserved %d bytes for a 10-byte chunk", c)
	}
}
