// Package sse reads Server-Sent Events for the streaming codecs
// (anthropic, gemini, openai-chat, openai-responses) with reused buffers:
// once they have grown, reading an event allocates nothing.
package sse

import (
	"bufio"
	"bytes"
	"errors"
	"io"

	"github.com/fabro-sh/fabro-go/services/llmgateway/internal/codec/jsonscan"
)

// RawEvent is the event name Next gives a bare JSON line outside any SSE
// field, when the Reader's RawJSON is set.
var RawEvent = []byte("raw")

// Reader reads events. The event name and data Next returns alias internal
// buffers valid until the next call.
type Reader struct {
	// KeepCut returns an event cut off by the end of the body (no blank
	// line after it) before io.EOF, so the caller's end marker check
	// decides whether the stream was complete. Without it such an event is
	// dropped, as the SSE spec says.
	KeepCut bool
	// RawJSON returns a line starting with '{' or '[' before any data:
	// field as one event named RawEvent, gathering following lines until
	// the text is valid JSON (or a blank line or the end). Gemini reports
	// an error after the stream has started that way.
	RawJSON bool

	r     *bufio.Reader
	event []byte
	data  []byte
	long  []byte // a line longer than the bufio buffer
}

// NewReader reads events from r.
func NewReader(r io.Reader) *Reader {
	return &Reader{r: bufio.NewReaderSize(r, 32<<10)}
}

// readLine returns the next line without its line ending (\n, \r\n).
func (s *Reader) readLine() ([]byte, error) {
	line, err := s.r.ReadSlice('\n')
	if errors.Is(err, bufio.ErrBufferFull) {
		s.long = append(s.long[:0], line...)
		for errors.Is(err, bufio.ErrBufferFull) {
			line, err = s.r.ReadSlice('\n')
			s.long = append(s.long, line...)
		}
		line = s.long
	}
	if err != nil && !(err == io.EOF && len(line) > 0) {
		return nil, err
	}
	line = bytes.TrimSuffix(line, []byte("\n"))
	line = bytes.TrimSuffix(line, []byte("\r"))
	return line, nil
}

// Next returns the next event's name ("" when it has no event: line) and
// data (data: lines joined with '\n'). An event is dispatched at a blank
// line once it has a data: line or a non-empty event name. At the end of
// the body Next returns io.EOF (see KeepCut).
func (s *Reader) Next() (event, data []byte, err error) {
	s.event, s.data = s.event[:0], s.data[:0]
	hasData := false
	for {
		line, err := s.readLine()
		if err != nil {
			if err == io.EOF && s.KeepCut && (hasData || len(s.event) > 0) {
				return s.event, s.data, nil
			}
			return nil, nil, err
		}
		if len(line) == 0 {
			if hasData || len(s.event) > 0 {
				return s.event, s.data, nil
			}
			continue
		}
		if line[0] == ':' { // comment, e.g. ": OPENROUTER PROCESSING" keep-alives
			continue
		}
		if s.RawJSON && !hasData && (line[0] == '{' || line[0] == '[') {
			// A bare JSON line; it may span lines: gather until valid.
			s.data = append(s.data, line...)
			for !jsonscan.Valid(s.data) {
				more, err := s.readLine()
				if err != nil || len(more) == 0 {
					break
				}
				s.data = append(s.data, '\n')
				s.data = append(s.data, more...)
			}
			return RawEvent, s.data, nil
		}
		field, value := line, []byte(nil)
		if i := bytes.IndexByte(line, ':'); i >= 0 {
			field, value = line[:i], line[i+1:]
			if len(value) > 0 && value[0] == ' ' {
				value = value[1:]
			}
		}
		switch string(field) {
		case "event":
			s.event = append(s.event[:0], value...)
		case "data":
			if hasData {
				s.data = append(s.data, '\n')
			}
			s.data = append(s.data, value...)
			hasData = true
		}
		// id and retry fields are ignored.
	}
}
