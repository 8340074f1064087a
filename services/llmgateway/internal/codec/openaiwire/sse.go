package openaiwire

import (
	"bufio"
	"bytes"
	"errors"
	"io"
)

// SSEReader reads server-sent events with no allocation per event once its
// buffers have grown: the event name and data it returns alias internal
// buffers valid until the next call.
type SSEReader struct {
	r     *bufio.Reader
	event []byte
	data  []byte
	line  []byte
	has   bool // a field of the current event was seen
	lines int  // data lines in the current event
}

// NewSSEReader reads events from r.
func NewSSEReader(r io.Reader) *SSEReader {
	return &SSEReader{r: bufio.NewReaderSize(r, 32<<10)}
}

// Next returns the next event's name ("" when it has no event: line) and
// data (data: lines joined with '\n'). It returns io.EOF at the end of the
// body; an event cut off by the end is still returned, so the caller's end
// marker check decides whether the stream was complete.
func (s *SSEReader) Next() (event, data []byte, err error) {
	s.event, s.data, s.has, s.lines = s.event[:0], s.data[:0], false, 0
	for {
		line, err := s.readLine()
		if err != nil {
			if err == io.EOF && s.has {
				return s.event, s.data, nil
			}
			return nil, nil, err
		}
		if len(line) == 0 {
			if s.has {
				return s.event, s.data, nil
			}
			continue
		}
		if line[0] == ':' { // comment, e.g. ": OPENROUTER PROCESSING" keep-alives
			continue
		}
		field, value := line, []byte(nil)
		if i := bytes.IndexByte(line, ':'); i >= 0 {
			field, value = line[:i], line[i+1:]
			if len(value) > 0 && value[0] == ' ' {
				value = value[1:]
			}
		}
		switch string(field) {
		case "data":
			if s.lines > 0 {
				s.data = append(s.data, '\n')
			}
			s.data = append(s.data, value...)
			s.lines++
			s.has = true
		case "event":
			s.event = append(s.event[:0], value...)
			s.has = true
		}
	}
}

// readLine returns one line without its terminator (\n, \r\n).
func (s *SSEReader) readLine() ([]byte, error) {
	line, err := s.r.ReadSlice('\n')
	if errors.Is(err, bufio.ErrBufferFull) {
		s.line = append(s.line[:0], line...)
		for errors.Is(err, bufio.ErrBufferFull) {
			line, err = s.r.ReadSlice('\n')
			s.line = append(s.line, line...)
		}
		line = s.line
	}
	if err != nil && !(err == io.EOF && len(line) > 0) {
		return nil, err
	}
	line = bytes.TrimSuffix(line, []byte{'\n'})
	line = bytes.TrimSuffix(line, []byte{'\r'})
	return line, nil
}
