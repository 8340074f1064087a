package tools

import (
	"slices"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
)

func bp(lines ...string) string {
	return "*** Begin Patch\n" + strings.Join(lines, "\n") + "\n*** End Patch"
}

func TestParsePatchRelativeAndAbsolutePaths(t *testing.T) {
	hunks, err := parsePatch(bp("*** Add File: /abs/x", "+1", "*** Delete File: rel/y", "*** Update File: z", "*** Move to: w", "@@ ctx @@", " a"))
	if err != nil {
		t.Fatal(err)
	}
	got := map[string]hunkKind{}
	for _, h := range hunks {
		got[h.path] = h.kind
	}
	if diff := cmp.Diff(map[string]hunkKind{"/abs/x": hunkAdd, "rel/y": hunkDelete, "z": hunkUpdate}, got); diff != "" {
		t.Error(diff)
	}
	if hunks[2].moveTo != "w" || !slices.Equal(hunks[2].chunks[0].contexts, []string{"ctx"}) {
		t.Errorf("update hunk %+v", hunks[2])
	}
}

func TestSeek(t *testing.T) {
	lines := []string{"a", "b ", "  c", "d", "b"}
	tests := []struct {
		pat   []string
		start int
		eof   bool
		want  int
	}{
		{[]string{"a"}, 0, false, 0},
		{[]string{"b"}, 0, false, 4}, // exact wins over rstrip, pass by pass
		{[]string{"b", "  c"}, 0, false, 1},
		{[]string{"c"}, 0, false, 2},
		{[]string{"a"}, 1, false, -1},
		{[]string{"b"}, 0, true, 4},
		{nil, 3, false, 3},
		{[]string{"a", "b", "c", "d", "e", "f"}, 0, false, -1},
	}
	for _, tt := range tests {
		if got := seek(lines, tt.pat, tt.start, tt.eof); got != tt.want {
			t.Errorf("seek(%q, %d, %v) = %d, want %d", tt.pat, tt.start, tt.eof, got, tt.want)
		}
	}
}
