package gemini

import (
	"bufio"
	"bytes"
	"errors"
	"io"

	"github.com/fabro-sh/fabro-go/services/llmgateway/internal/codec/jsonscan"
)

// rawEvent names a bare JSON line outside any SSE field.
var rawEvent = []byte("raw")

// sseReader reads Server-Sent Events with reused buffers: the event name
// and data it returns are valid until the next call.
type sseReader struct {
	r     *bufio.Reader
	event []byte
	data  []byte
	long  []byte // a line longer than the bufio buffer
}

func newSSEReader(r io.Reader) *sseReader {
	return &sseReader{r: bufio.NewReaderSize(r, 32<<10)}
}

// readLine returns the next line without its line ending.
func (s *sseReader) readLine() ([]byte, error) {
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

// next returns the next event. At the end of the body it returns io.EOF;
// an event not terminated by a blank line is dropped, as the SSE spec says.
func (s *sseReader) next() (event, data []byte, err error) {
	s.event, s.data = s.event[:0], s.data[:0]
	hasData := false
	for {
		line, err := s.readLine()
		if err != nil {
			return nil, nil, err
		}
		if len(line) == 0 {
			if hasData || len(s.event) > 0 {
				return s.event, s.data, nil
			}
			continue
		}
		if !hasData && (line[0] == '{' || line[0] == '[') {
			// A bare JSON line: how the API reports an error after the
			// stream has started. It may span lines; gather until valid.
			s.data = append(s.data, line...)
			for !jsonscan.Valid(s.data) {
				more, err := s.readLine()
				if err != nil || len(more) == 0 {
					break
				}
				s.data = append(s.data, '\n')
				s.data = append(s.data, more...)
			}
			return rawEvent, s.data, nil
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
		// Comments (":" lines), id and retry fields are ignored.
	}
}
