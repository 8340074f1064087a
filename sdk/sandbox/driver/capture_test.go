package driver_test

import (
	"bytes"
	"fmt"
	"math/rand/v2"
	"testing"

	"github.com/google/go-cmp/cmp"

	"github.com/fabro-sh/fabro-go/sdk/sandbox/driver"
)

// model is what a Capture must retain of data with limit: the first half
// of the limit as head, the last bytes up to the rest as tail. Cuts fall on
// byte offsets, not on rune boundaries: the result is bytes, and head_bytes
// tells a client where the omitted middle is.
func model(data []byte, limit int) ([]byte, driver.CaptureStats) {
	h := min(len(data), limit/2)
	tail := data[h:]
	tail = tail[max(0, len(tail)-(limit-h)):]
	kept := append(append([]byte(nil), data[:h]...), tail...)
	st := driver.CaptureStats{Observed: int64(len(data)), Retained: int64(len(kept)), Omitted: int64(len(data) - len(kept)), Head: int64(h)}
	if st.Omitted == 0 {
		st.Head = st.Retained
	}
	return kept, st
}

func TestCapture(t *testing.T) {
	tests := []struct {
		name  string
		limit int
		data  string
		want  string
		stats driver.CaptureStats
	}{
		{"empty", 10, "", "", driver.CaptureStats{}},
		{"fits", 10, "hello", "hello", driver.CaptureStats{Observed: 5, Retained: 5, Head: 5}},
		{"exactly the limit", 5, "hello", "hello", driver.CaptureStats{Observed: 5, Retained: 5, Head: 5}},
		{"one over", 4, "hello", "helo", driver.CaptureStats{Observed: 5, Retained: 4, Omitted: 1, Head: 2}},
		{"odd limit: the tail gets the extra byte", 5, "abcdefgh", "abfgh", driver.CaptureStats{Observed: 8, Retained: 5, Omitted: 3, Head: 2}},
		{"limit 1 keeps only the last byte", 1, "abc", "c", driver.CaptureStats{Observed: 3, Retained: 1, Omitted: 2, Head: 0}},
		{"limit 0 keeps nothing", 0, "abc", "", driver.CaptureStats{Observed: 3, Omitted: 3}},
		// "日本語" is three 3-byte runes: the head cut falls inside 日 and
		// the tail cut inside 語.
		{"cuts inside multi-byte runes", 4, "日本語", "\xe6\x97\xaa\x9e", driver.CaptureStats{Observed: 9, Retained: 4, Omitted: 5, Head: 2}},
		{"cuts on rune boundaries when they fall there", 6, "日本語", "日語", driver.CaptureStats{Observed: 9, Retained: 6, Omitted: 3, Head: 3}},
		{"two-byte runes, odd cut", 3, "éèêë", "\xc3\xc3\xab", driver.CaptureStats{Observed: 8, Retained: 3, Omitted: 5, Head: 1}},
	}
	for _, tt := range tests {
		// The same data written whole, a byte at a time and in 2- and
		// 3-byte pieces must be retained the same.
		for _, piece := range []int{len(tt.data) + 1, 1, 2, 3} {
			t.Run(fmt.Sprintf("%s/pieces of %d", tt.name, piece), func(t *testing.T) {
				c := driver.NewCapture(tt.limit)
				for d := []byte(tt.data); len(d) > 0; {
					n := min(piece, len(d))
					if k, err := c.Write(d[:n]); k != n || err != nil {
						t.Fatalf("Write = %d, %v", k, err)
					}
					d = d[n:]
				}
				if got := c.Bytes(); string(got) != tt.want {
					t.Errorf("Bytes = %q; want %q", got, tt.want)
				}
				if diff := cmp.Diff(tt.stats, c.Stats()); diff != "" {
					t.Errorf("Stats (-want +got):\n%s", diff)
				}
			})
		}
	}
}

// TestCaptureRandom compares a Capture with the model over random data,
// limits and write sizes, checking part way through as well as at the end.
func TestCaptureRandom(t *testing.T) {
	r := rand.New(rand.NewPCG(1, 2))
	alphabet := []byte("ab\n日é\x00\xff")
	for i := range 2000 {
		limit := r.IntN(40)
		data := make([]byte, r.IntN(200))
		for j := range data {
			data[j] = alphabet[r.IntN(len(alphabet))]
		}
		c := driver.NewCapture(limit)
		for written := 0; written < len(data); {
			n := min(len(data)-written, 1+r.IntN(3*limit+2))
			c.Write(data[written : written+n])
			written += n
			want, wantStats := model(data[:written], limit)
			if got := c.Bytes(); !bytes.Equal(got, want) || c.Stats() != wantStats {
				t.Fatalf("case %d: limit %d after %d of %d bytes: got %q %+v; want %q %+v", i, limit, written, len(data), got, c.Stats(), want, wantStats)
			}
		}
	}
}

// TestCaptureBounded checks that memory stays within the limit however
// much is written.
func TestCaptureBounded(t *testing.T) {
	c := driver.NewCapture(1000)
	chunk := bytes.Repeat([]byte("x"), 32<<10)
	allocs := testing.AllocsPerRun(100, func() { c.Write(chunk) })
	if allocs != 0 {
		t.Errorf("a full capture allocates %v times per write; want 0", allocs)
	}
	if st := c.Stats(); st.Retained != 1000 || len(c.Bytes()) != 1000 {
		t.Errorf("retained %d; want 1000", st.Retained)
	}
}

func BenchmarkCaptureWrite(b *testing.B) {
	c := driver.NewCapture(1 << 20)
	chunk := bytes.Repeat([]byte("x"), 32<<10)
	b.SetBytes(int64(len(chunk)))
	for b.Loop() {
		c.Write(chunk)
	}
}
