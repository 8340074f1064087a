package driver

// Capture retains a bounded copy of a stream: the first bytes up to half the
// limit (the head) and the last bytes up to the rest (the tail, a ring), and
// counts everything. Memory stays bounded however much is written, so a
// command that prints gigabytes is drained without harm.
type Capture struct {
	headCap int
	head    []byte
	tail    []byte // ring of tailCap bytes once full
	tailCap int
	tailPos int // next write position in the ring once full
	full    bool
	total   int64
}

// NewCapture returns a Capture retaining at most limit bytes.
func NewCapture(limit int) *Capture {
	h := limit / 2
	return &Capture{headCap: h, tailCap: limit - h}
}

// Write records p; it never fails.
func (c *Capture) Write(p []byte) (int, error) {
	n := len(p)
	c.total += int64(n)
	if room := c.headCap - len(c.head); room > 0 {
		k := min(room, len(p))
		c.head = append(c.head, p[:k]...)
		p = p[k:]
	}
	if c.tailCap == 0 || len(p) == 0 {
		return n, nil
	}
	if len(p) >= c.tailCap {
		// Only the last tailCap bytes can survive.
		if c.tail == nil || len(c.tail) < c.tailCap {
			c.tail = make([]byte, c.tailCap)
		}
		copy(c.tail, p[len(p)-c.tailCap:])
		c.full, c.tailPos = true, 0
		return n, nil
	}
	if !c.full {
		if room := c.tailCap - len(c.tail); len(p) <= room {
			c.tail = append(c.tail, p...)
			c.full = len(c.tail) == c.tailCap
			return n, nil
		}
		// Grow to the full ring, then fall through to wrap around.
		grown := make([]byte, c.tailCap)
		copy(grown, c.tail)
		c.tailPos = len(c.tail)
		c.tail, c.full = grown, true
		if c.tailPos == c.tailCap {
			c.tailPos = 0
		}
	}
	for len(p) > 0 {
		k := copy(c.tail[c.tailPos:], p)
		p = p[k:]
		c.tailPos = (c.tailPos + k) % c.tailCap
	}
	return n, nil
}

// Bytes returns the retained head followed by the retained tail.
func (c *Capture) Bytes() []byte {
	out := make([]byte, 0, len(c.head)+len(c.tail))
	out = append(out, c.head...)
	if c.full {
		out = append(out, c.tail[c.tailPos:]...)
		return append(out, c.tail[:c.tailPos]...)
	}
	return append(out, c.tail...)
}

// Stats accounts for what was written and retained.
func (c *Capture) Stats() CaptureStats {
	retained := int64(len(c.head) + len(c.tail))
	head := int64(len(c.head))
	if retained == c.total {
		head = retained // nothing omitted: all of it counts as head
	}
	return CaptureStats{Observed: c.total, Retained: retained, Omitted: c.total - retained, Head: head}
}
