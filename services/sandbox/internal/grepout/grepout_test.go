package grepout

import (
	"bufio"
	"fmt"
	"io"
	"runtime"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"

	"github.com/fabro-sh/fabro-go/sdk/sandbox/driver"
)

func name(b []byte) string { return string(b) }

func TestParseRipgrepJSON(t *testing.T) {
	const out = `{"type":"begin","data":{"path":{"text":"a.txt"}}}
{"type":"match","data":{"path":{"text":"a.txt"},"lines":{"text":"one two\n"},"line_number":3,"absolute_offset":0,"submatches":[{"match":{"text":"two"},"start":4,"end":7}]}}
{"type":"end","data":{"path":{"text":"a.txt"},"binary_offset":null,"stats":{"elapsed":{"secs":0,"nanos":1}}}}
{"type":"begin","data":{"path":{"text":"bin"}}}
{"type":"match","data":{"path":{"text":"bin"},"lines":{"bytes":"AGI="},"line_number":1,"submatches":[]}}
{"type":"end","data":{"path":{"text":"bin"},"binary_offset":5}}
{"type":"begin","data":{"path":{"bytes":"/w=="}}}
{"type":"match","data":{"path":{"bytes":"/w=="},"lines":{"bytes":"eA=="},"line_number":9,"submatches":[]}}
{"type":"end","data":{"path":{"bytes":"/w=="},"binary_offset":null}}
{"type":"summary","data":{"elapsed_total":{"human":"0s"},"stats":{}}}
`
	var got []driver.GrepMatch
	more, err := ParseRipgrepJSON(bufio.NewReader(strings.NewReader(out)), name, 10, &got)
	if err != nil || more {
		t.Fatalf("ParseRipgrepJSON: more %v, %v", more, err)
	}
	want := []driver.GrepMatch{{Path: "a.txt", Line: 3, Text: "one two"}, {Path: "\xff", Line: 9, Text: "x"}}
	if diff := cmp.Diff(want, got); diff != "" {
		t.Errorf("matches (-want +got):\n%s", diff)
	}
	got = nil
	if more, err := ParseRipgrepJSON(bufio.NewReader(strings.NewReader(out)), name, 1, &got); err != nil || !more || len(got) != 1 {
		t.Errorf("max 1: %d matches, more %v, %v", len(got), more, err)
	}
	for _, bad := range []string{`{"type":"match","data":`, `{"type":`, `[1]`, `{"type":"match"} garbage`} {
		if _, err := ParseRipgrepJSON(bufio.NewReader(strings.NewReader(bad)), name, 10, &got); err == nil {
			t.Errorf("%q: no error", bad)
		}
	}
}

// submatches streams a match message for one line of n a's, with n
// submatches, as ripgrep prints a search for "a" in it: about 50 bytes a
// byte of the line.
type submatches struct {
	r io.Reader
}

func newSubmatches(n int) *submatches {
	head := fmt.Sprintf(`{"type":"begin","data":{"path":{"text":"long"}}}`+"\n"+`{"type":"match","data":{"path":{"text":"long"},"lines":{"text":"%s"},"line_number":1,"absolute_offset":0,"submatches":[`, strings.Repeat("a", n))
	i := 0
	var buf []byte
	items := readerFunc(func(p []byte) (int, error) {
		for len(buf) < len(p) && i < n {
			if i > 0 {
				buf = append(buf, ',')
			}
			buf = fmt.Appendf(buf, `{"match":{"text":"a"},"start":%d,"end":%d}`, i, i+1)
			i++
		}
		if len(buf) == 0 {
			return 0, io.EOF
		}
		w := copy(p, buf)
		buf = buf[w:]
		return w, nil
	})
	tail := `]}}` + "\n" + `{"type":"end","data":{"path":{"text":"long"},"binary_offset":null}}` + "\n"
	return &submatches{io.MultiReader(strings.NewReader(head), items, strings.NewReader(tail))}
}

func (s *submatches) Read(p []byte) (int, error) { return s.r.Read(p) }

type readerFunc func([]byte) (int, error)

func (f readerFunc) Read(p []byte) (int, error) { return f(p) }

// TestParseRipgrepJSONLongLine checks that a message far larger than its
// line (every submatch listed) is not held whole: a 512 KiB line's 25 MB
// message is parsed with a heap that grows by a small multiple of the line.
func TestParseRipgrepJSONLongLine(t *testing.T) {
	const n = 1 << 19
	var before, after runtime.MemStats
	runtime.GC()
	runtime.ReadMemStats(&before)
	var got []driver.GrepMatch
	if _, err := ParseRipgrepJSON(bufio.NewReader(newSubmatches(n)), name, 10, &got); err != nil {
		t.Fatal(err)
	}
	runtime.ReadMemStats(&after)
	if len(got) != 1 || got[0].Line != 1 || !got[0].TextTruncated || len(got[0].Text) != MaxLineBytes {
		t.Fatalf("got %d matches: %+v", len(got), got)
	}
	// HeapSys only grows: a parser that read the 50 MB message whole would
	// have grown it by at least that.
	if grew := after.HeapSys - before.HeapSys; grew > 16<<20 {
		t.Errorf("the heap grew by %d MiB parsing a 512 KiB line's message", grew>>20)
	}
}
