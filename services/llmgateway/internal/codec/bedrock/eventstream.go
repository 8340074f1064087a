package bedrock

import (
	"encoding/binary"
	"errors"
	"fmt"
	"hash/crc32"
	"io"
)

// The AWS event-stream framing (application/vnd.amazon.eventstream):
//
//	total_len uint32 | headers_len uint32 | prelude_crc uint32 |
//	headers | payload | message_crc uint32
//
// All integers are big-endian; both CRCs are CRC32 (IEEE); message_crc
// covers every preceding byte of the frame.
const (
	preludeLen = 12
	// frameOverhead is the prelude plus the trailing message CRC.
	frameOverhead = preludeLen + 4
	// maxFrameLen bounds one frame, as the AWS decoders do (16 MiB), so a
	// corrupt length cannot make us allocate without limit.
	maxFrameLen = 16 << 20
)

// errFrame marks a frame that violates the framing.
var errFrame = errors.New("malformed event-stream frame")

// frame is one decoded frame. Its slices point into the reader's buffer and
// are valid until the next read.
type frame struct {
	messageType   []byte // :message-type: event, exception or error
	eventType     []byte // :event-type
	exceptionType []byte // :exception-type
	errorCode     []byte // :error-code
	errorMessage  []byte // :error-message
	payload       []byte
}

// frameReader reads frames into one reusable buffer.
type frameReader struct {
	r       io.Reader
	prelude [preludeLen]byte
	buf     []byte
}

// next reads one frame. It returns io.EOF at a clean end between frames,
// io.ErrUnexpectedEOF inside a frame, and errFrame (wrapped) for bad lengths,
// CRCs or headers.
func (fr *frameReader) next(f *frame) error {
	*f = frame{}
	if _, err := io.ReadFull(fr.r, fr.prelude[:]); err != nil {
		return err // io.EOF only when no byte of the frame was read
	}
	total := binary.BigEndian.Uint32(fr.prelude[0:4])
	hlen := binary.BigEndian.Uint32(fr.prelude[4:8])
	if crc := crc32.ChecksumIEEE(fr.prelude[:8]); crc != binary.BigEndian.Uint32(fr.prelude[8:12]) {
		return fmt.Errorf("%w: prelude CRC %08x, computed %08x", errFrame, binary.BigEndian.Uint32(fr.prelude[8:12]), crc)
	}
	if total < frameOverhead || total > maxFrameLen || hlen > total-frameOverhead {
		return fmt.Errorf("%w: total length %d, headers length %d", errFrame, total, hlen)
	}
	rest := int(total) - preludeLen
	if cap(fr.buf) < rest {
		fr.buf = make([]byte, rest, max(rest, 2*cap(fr.buf), 4096))
	}
	b := fr.buf[:rest]
	if _, err := io.ReadFull(fr.r, b); err != nil {
		if err == io.EOF {
			err = io.ErrUnexpectedEOF
		}
		return err
	}
	crc := crc32.Update(crc32.ChecksumIEEE(fr.prelude[:]), crc32.IEEETable, b[:rest-4])
	if want := binary.BigEndian.Uint32(b[rest-4:]); crc != want {
		return fmt.Errorf("%w: message CRC %08x, computed %08x", errFrame, want, crc)
	}
	if err := parseHeaders(b[:hlen], f); err != nil {
		return err
	}
	f.payload = b[hlen : rest-4]
	return nil
}

// parseHeaders picks out the headers the decoder uses and checks the rest
// are well-formed.
func parseHeaders(h []byte, f *frame) error {
	for len(h) > 0 {
		nlen := int(h[0])
		if len(h) < 1+nlen+1 {
			return fmt.Errorf("%w: truncated header", errFrame)
		}
		name := h[1 : 1+nlen]
		typ := h[1+nlen]
		h = h[2+nlen:]
		var size int
		switch typ {
		case 0, 1: // bool true, bool false
		case 2: // byte
			size = 1
		case 3: // int16
			size = 2
		case 4: // int32
			size = 4
		case 5, 8: // int64, timestamp
			size = 8
		case 9: // uuid
			size = 16
		case 6, 7: // bytes, string: uint16 length prefix
			if len(h) < 2 {
				return fmt.Errorf("%w: truncated header value", errFrame)
			}
			size = 2 + int(binary.BigEndian.Uint16(h))
		default:
			return fmt.Errorf("%w: header value type %d", errFrame, typ)
		}
		if len(h) < size {
			return fmt.Errorf("%w: truncated header value", errFrame)
		}
		if typ == 7 {
			v := h[2:size]
			switch string(name) {
			case ":message-type":
				f.messageType = v
			case ":event-type":
				f.eventType = v
			case ":exception-type":
				f.exceptionType = v
			case ":error-code":
				f.errorCode = v
			case ":error-message":
				f.errorMessage = v
			}
		}
		h = h[size:]
	}
	return nil
}
