package tools

import (
	"strings"
	"testing"
	"unicode/utf8"
)

// TestTruncateSaysHowToSeeTheRest: the note says how much was cut and how
// the tool shows the rest.
func TestTruncateSaysHowToSeeTheRest(t *testing.T) {
	for _, tc := range []struct {
		tool  string
		limit Limit
		want  []string
	}{
		{"read_file", Limit{MaxChars: 10, Mode: HeadTail}, []string{"90 characters were removed", "offset and limit"}},
		{"shell", Limit{MaxChars: 10, Mode: Tail}, []string{"first 90 characters were removed", "redirected to a file"}},
		{"grep", Limit{MaxLines: 1, Mode: Head}, []string{"9 lines (90 characters) omitted", "narrower pattern"}},
		{"mcp__s__t", Limit{MaxChars: 10, Mode: Head}, []string{"last 90 characters were removed", "narrower arguments"}},
	} {
		got, _ := truncateFor(strings.Repeat("123456789\n", 10), tc.limit, tc.tool)
		for _, w := range tc.want {
			if !strings.Contains(got, w) {
				t.Errorf("%s: %q lacks %q", tc.tool, got, w)
			}
		}
	}
}

func TestTruncateBoundaries(t *testing.T) {
	tests := []struct {
		name     string
		in       string
		limit    Limit
		omitted  int64
		prefix   string // what the output starts with
		suffix   string // and ends with
		contains string
	}{
		{"no limit", strings.Repeat("a", 100), Limit{}, 0, strings.Repeat("a", 100), "", ""},
		{"tail exactly at limit", strings.Repeat("a", 10), Limit{MaxChars: 10, Mode: Tail}, 0, strings.Repeat("a", 10), strings.Repeat("a", 10), ""},
		{"tail one over", "x" + strings.Repeat("a", 10), Limit{MaxChars: 10, Mode: Tail}, 1, "[WARNING: Tool output was truncated. The first 1 characters were removed", "\n\n" + strings.Repeat("a", 10), ""},
		{"head one over", strings.Repeat("a", 10) + "x", Limit{MaxChars: 10, Mode: Head}, 1, strings.Repeat("a", 10) + "\n\n[WARNING", "]", "The last 1 characters were removed"},
		{"head_tail one over", "hhhhhXttttt", Limit{MaxChars: 10, Mode: HeadTail}, 1, "hhhhh\n\n[WARNING", "]\n\nttttt", "1 characters were removed from the middle"},
		{"head_tail odd limit", "hhhhXXXXttttt", Limit{MaxChars: 9, Mode: HeadTail}, 4, "hhhh\n\n", "\n\nttttt", "4 characters were removed"},
		{"runes not bytes: at limit", strings.Repeat("é", 10), Limit{MaxChars: 10, Mode: Tail}, 0, strings.Repeat("é", 10), "", ""},
		{"runes not bytes: over", strings.Repeat("é", 11), Limit{MaxChars: 10, Mode: Tail}, 1, "[WARNING", "\n\n" + strings.Repeat("é", 10), ""},
		{"lines tail", "1\n2\n3\n4\n", Limit{MaxLines: 2, Mode: Tail}, 4, "[... 2 lines (4 characters) omitted from the start; 2 of 4 lines shown.", "...]\n3\n4\n", ""},
		{"lines head_tail", "1\n2\n3\n4\n5\n", Limit{MaxLines: 2, Mode: HeadTail}, 6, "1\n[... 3 lines (6 characters) omitted from the middle; 2 of 5 lines shown.", "...]\n5\n", ""},
		{"lines at limit", "1\n2\n", Limit{MaxLines: 2, Mode: HeadTail}, 0, "1\n2\n", "", ""},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got, omitted := truncate(tt.in, tt.limit)
			if omitted != tt.omitted {
				t.Errorf("omitted %d, want %d", omitted, tt.omitted)
			}
			if !strings.HasPrefix(got, tt.prefix) || !strings.HasSuffix(got, tt.suffix) || !strings.Contains(got, tt.contains) {
				t.Errorf("got %q", got)
			}
			if tt.omitted == 0 && got != tt.in {
				t.Errorf("changed without omitting: %q", got)
			}
			if !utf8.ValidString(got) {
				t.Errorf("invalid UTF-8: %q", got)
			}
		})
	}
}

func TestDefaultLimitsTable(t *testing.T) {
	want := map[string]Limit{
		"grep":        {MaxChars: 30_000, Mode: Tail},
		"glob":        {MaxChars: 20_000, Mode: Tail},
		"edit_file":   {MaxChars: 10_000, Mode: Tail},
		"apply_patch": {MaxChars: 10_000, Mode: Tail},
		"write_file":  {MaxChars: 1_000, Mode: Tail},
		"read_file":   {MaxChars: 50_000, Mode: HeadTail},
		"shell":       {MaxChars: 30_000, Mode: HeadTail},
		"web_fetch":   {},
	}
	for name, l := range want {
		if got := DefaultLimit(name); got != l {
			t.Errorf("%s: %+v, want %+v", name, got, l)
		}
	}
	s := NewSet("openai", Full, Env{}, nil)
	for name, l := range want {
		if l.MaxChars == 0 {
			continue
		}
		in := strings.Repeat("x", l.MaxChars)
		if r := s.finish(name, output{text: in}); r.Truncated || r.Output != in {
			t.Errorf("%s: truncated at exactly its limit", name)
		}
		r := s.finish(name, output{text: in + "y"})
		if !r.Truncated || r.CharsOmitted != 1 || r.Full != in+"y" {
			t.Errorf("%s: one over the limit: truncated=%v omitted=%d", name, r.Truncated, r.CharsOmitted)
		}
	}
}

func TestRetention(t *testing.T) {
	in := strings.Repeat("é", retentionBytes) // 2 MiB of 2-byte runes
	got := retain(in)
	if len(got) > retentionBytes+100 || !utf8.ValidString(got) || !strings.Contains(got, "bytes omitted") {
		t.Errorf("retain: %d bytes, valid=%v", len(got), utf8.ValidString(got))
	}
	if retain("short") != "short" {
		t.Error("short output changed")
	}
}
