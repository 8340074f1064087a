package sse

import (
	"io"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
)

type ev struct{ Event, Data string }

func readAll(t *testing.T, r *Reader) []ev {
	t.Helper()
	var got []ev
	for {
		e, d, err := r.Next()
		if err == io.EOF {
			return got
		}
		if err != nil {
			t.Fatal(err)
		}
		got = append(got, ev{string(e), string(d)})
	}
}

func TestReader(t *testing.T) {
	long := strings.Repeat("x", 100<<10) // longer than the read buffer
	body := ": keep-alive\n\nevent: a\ndata: 1\ndata: 2\n\ndata:no-space\r\n\r\nid: 7\nretry: 10\ndata: " + long + "\n\nevent: only-name\n\nevent:\n\ndata: last-without-blank-line"
	common := []ev{{"a", "1\n2"}, {"", "no-space"}, {"", long}, {"only-name", ""}}

	t.Run("KeepCut", func(t *testing.T) {
		r := NewReader(strings.NewReader(body))
		r.KeepCut = true
		want := append(common[:len(common):len(common)], ev{"", "last-without-blank-line"})
		if diff := cmp.Diff(want, readAll(t, r)); diff != "" {
			t.Errorf("(-want +got):\n%s", diff)
		}
	})
	t.Run("drop cut event", func(t *testing.T) {
		r := NewReader(strings.NewReader(body))
		if diff := cmp.Diff(common, readAll(t, r)); diff != "" {
			t.Errorf("(-want +got):\n%s", diff)
		}
	})
}

func TestReaderRawJSON(t *testing.T) {
	body := "data: {\"a\":1}\n\n{\"error\":{\n  \"code\": 429\n}}\n\n[{\"error\":{}}]\n"
	r := NewReader(strings.NewReader(body))
	r.RawJSON = true
	want := []ev{{"", `{"a":1}`}, {"raw", "{\"error\":{\n  \"code\": 429\n}}"}, {"raw", `[{"error":{}}]`}}
	if diff := cmp.Diff(want, readAll(t, r)); diff != "" {
		t.Errorf("(-want +got):\n%s", diff)
	}

	// Without RawJSON such a line is an unknown field, ignored.
	r = NewReader(strings.NewReader(body))
	if diff := cmp.Diff(want[:1], readAll(t, r)); diff != "" {
		t.Errorf("(-want +got):\n%s", diff)
	}
}

func TestReaderNoAllocs(t *testing.T) {
	body := strings.Repeat("event: e\ndata: {\"text\":\"hello\"}\n\n", 200)
	sr := strings.NewReader(body)
	r := NewReader(sr)
	_, _, _ = r.Next() // grow the buffers
	allocs := testing.AllocsPerRun(100, func() {
		if _, _, err := r.Next(); err != nil {
			t.Fatal(err)
		}
	})
	if allocs != 0 {
		t.Errorf("Next allocates %v times per event, want 0", allocs)
	}
}
