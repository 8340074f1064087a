package tools_test

import (
	"strings"
	"testing"

	. "github.com/fabro-sh/fabro-go/services/agent/tooltest"

	"github.com/google/go-cmp/cmp"

	sandboxv1 "github.com/fabro-sh/fabro-go/gen/fabro/sandbox/v1"
)

// patchCase is one apply_patch scenario, in the spirit of Codex's
// fixtures: files before, the patch, files after (nil = unchanged) or the
// error.
type patchCase struct {
	name   string
	before map[string]string
	patch  string
	after  map[string]string // every file of the workspace after; nil: same as before
	kind   string
	want   []string
}

func bp(lines ...string) string {
	return "*** Begin Patch\n" + strings.Join(lines, "\n") + "\n*** End Patch"
}

var patchCorpus = []patchCase{
	{
		name:  "add file with parent directories",
		patch: bp("*** Add File: src/new/hello.txt", "+hello", "+world"),
		after: map[string]string{"src/new/hello.txt": "hello\nworld\n"},
		want:  []string{"Success. Updated the following files:\nA src/new/hello.txt\n"},
	},
	{
		name:   "add overwrites an existing file",
		before: map[string]string{"a.txt": "old\n"},
		patch:  bp("*** Add File: a.txt", "+new"),
		after:  map[string]string{"a.txt": "new\n"},
	},
	{
		name:   "delete file",
		before: map[string]string{"a.txt": "x\n", "b.txt": "y\n"},
		patch:  bp("*** Delete File: a.txt"),
		after:  map[string]string{"b.txt": "y\n"},
		want:   []string{"D a.txt"},
	},
	{
		name:   "delete missing file fails",
		before: map[string]string{"b.txt": "y\n"},
		patch:  bp("*** Delete File: a.txt"),
		kind:   KindFailed, want: []string{"Failed to delete file a.txt", "No files were changed"},
	},
	{
		name:   "update one line",
		before: map[string]string{"a.py": "def f():\n    return 1\n\nprint(f())\n"},
		patch:  bp("*** Update File: a.py", "@@ def f():", "-    return 1", "+    return 2"),
		after:  map[string]string{"a.py": "def f():\n    return 2\n\nprint(f())\n"},
		want:   []string{"M a.py"},
	},
	{
		name:   "first chunk without @@",
		before: map[string]string{"a.txt": "a\nb\nc\n"},
		patch:  bp("*** Update File: a.txt", " a", "-b", "+B", " c"),
		after:  map[string]string{"a.txt": "a\nB\nc\n"},
	},
	{
		name:   "context anchor picks the right occurrence",
		before: map[string]string{"a.go": "func A() {\n\treturn\n}\n\nfunc B() {\n\treturn\n}\n"},
		patch:  bp("*** Update File: a.go", "@@ func B() {", "-\treturn", "+\treturn // b"),
		after:  map[string]string{"a.go": "func A() {\n\treturn\n}\n\nfunc B() {\n\treturn // b\n}\n"},
	},
	{
		name:   "stacked anchors are sought in order",
		before: map[string]string{"a.py": "class A:\n    def run(self):\n        pass\nclass B:\n    def run(self):\n        pass\n"},
		patch:  bp("*** Update File: a.py", "@@ class B:", "@@     def run(self):", "-        pass", "+        return 1"),
		after:  map[string]string{"a.py": "class A:\n    def run(self):\n        pass\nclass B:\n    def run(self):\n        return 1\n"},
	},
	{
		name:   "two chunks in one file",
		before: map[string]string{"a.txt": "1\n2\n3\n4\n5\n6\n7\n8\n"},
		patch:  bp("*** Update File: a.txt", "@@", " 1", "-2", "+two", " 3", "@@", " 6", "-7", "+seven", " 8"),
		after:  map[string]string{"a.txt": "1\ntwo\n3\n4\n5\n6\nseven\n8\n"},
	},
	{
		name:   "two update hunks of one file apply in turn",
		before: map[string]string{"a.txt": "a\nb\n"},
		patch:  bp("*** Update File: a.txt", "-a", "+A", "*** Update File: a.txt", "-b", "+B"),
		after:  map[string]string{"a.txt": "A\nB\n"},
	},
	{
		name:   "deletion-only chunk",
		before: map[string]string{"a.txt": "keep\ndrop\nkeep2\n"},
		patch:  bp("*** Update File: a.txt", "@@", " keep", "-drop", " keep2"),
		after:  map[string]string{"a.txt": "keep\nkeep2\n"},
	},
	{
		name:   "move with edit into a new directory",
		before: map[string]string{"old/a.txt": "x\ny\n"},
		patch:  bp("*** Update File: old/a.txt", "*** Move to: new/dir/b.txt", "@@", "-x", "+X", " y"),
		after:  map[string]string{"new/dir/b.txt": "X\ny\n"},
		want:   []string{"M new/dir/b.txt"},
	},
	{
		name:   "move overwrites an existing destination",
		before: map[string]string{"a.txt": "a\n", "b.txt": "old b\n"},
		patch:  bp("*** Update File: a.txt", "*** Move to: b.txt", "-a", "+moved"),
		after:  map[string]string{"b.txt": "moved\n"},
	},
	{
		name:   "End of File anchors at the end",
		before: map[string]string{"a.txt": "x\nend\nx\nend\n"},
		patch:  bp("*** Update File: a.txt", "@@", " x", "-end", "+END", "*** End of File"),
		after:  map[string]string{"a.txt": "x\nend\nx\nEND\n"},
	},
	{
		name:   "pure addition without context appends at end of file",
		before: map[string]string{"a.txt": "a\nb\n"},
		patch:  bp("*** Update File: a.txt", "@@", "+c"),
		after:  map[string]string{"a.txt": "a\nb\nc\n"},
	},
	{
		name:   "pure addition under an anchor goes after the anchor",
		before: map[string]string{"a.py": "import os\n\ndef f():\n    pass\n"},
		patch:  bp("*** Update File: a.py", "@@ import os", "+import sys"),
		after:  map[string]string{"a.py": "import os\nimport sys\n\ndef f():\n    pass\n"},
	},
	{
		name:   "file without trailing newline gains one",
		before: map[string]string{"a.txt": "a\nb"},
		patch:  bp("*** Update File: a.txt", "-b", "+B"),
		after:  map[string]string{"a.txt": "a\nB\n"},
	},
	{
		name:   "whitespace-padded markers and headers",
		before: map[string]string{"a.txt": "a\n"},
		patch:  "  *** Begin Patch  \n  *** Update File: a.txt  \n-a\n+b\n  *** End Patch  \n",
		after:  map[string]string{"a.txt": "b\n"},
	},
	{
		name:   "heredoc wrapper",
		before: map[string]string{"a.txt": "a\n"},
		patch:  "<<'EOF'\n" + bp("*** Update File: a.txt", "-a", "+b") + "\nEOF",
		after:  map[string]string{"a.txt": "b\n"},
	},
	{
		name:   "CRLF patch parses",
		before: map[string]string{"a.txt": "a\n"},
		patch:  strings.ReplaceAll(bp("*** Update File: a.txt", "-a", "+b"), "\n", "\r\n"),
		after:  map[string]string{"a.txt": "b\n"},
	},
	{
		name:   "CRLF file keeps CRLF",
		before: map[string]string{"a.txt": "a\r\nb\r\n"},
		patch:  bp("*** Update File: a.txt", " a", "-b", "+B"),
		after:  map[string]string{"a.txt": "a\r\nB\r\n"},
	},
	{
		name:   "fuzzy: trailing whitespace",
		before: map[string]string{"a.txt": "a   \nb\n"},
		patch:  bp("*** Update File: a.txt", " a", "-b", "+B"),
		after:  map[string]string{"a.txt": "a   \nB\n"},
	},
	{
		name:   "fuzzy: indentation",
		before: map[string]string{"a.txt": "    a\n    b\n"},
		patch:  bp("*** Update File: a.txt", " a", "-b", "+    B"),
		after:  map[string]string{"a.txt": "    a\n    B\n"},
	},
	{
		name:   "fuzzy: unicode punctuation",
		before: map[string]string{"a.txt": "say \u201chi\u201d \u2014 ok\u00a0now\n"},
		patch:  bp("*** Update File: a.txt", "-say \"hi\" - ok now", "+said"),
		after:  map[string]string{"a.txt": "said\n"},
	},
	{
		name:   "unicode content",
		before: map[string]string{"a.txt": "héllo\n"},
		patch:  bp("*** Update File: a.txt", "-héllo", "+wörld 世界"),
		after:  map[string]string{"a.txt": "wörld 世界\n"},
	},
	{
		name:   "add, update and delete together",
		before: map[string]string{"keep.txt": "k\n", "gone.txt": "g\n"},
		patch:  bp("*** Add File: new.txt", "+n", "*** Update File: keep.txt", "-k", "+K", "*** Delete File: gone.txt"),
		after:  map[string]string{"new.txt": "n\n", "keep.txt": "K\n"},
		want:   []string{"A new.txt\nM keep.txt\nD gone.txt\n"},
	},
	// Failures leave every file untouched.
	{
		name:   "failure after a good hunk changes nothing",
		before: map[string]string{"a.txt": "a\n", "b.txt": "b\n"},
		patch:  bp("*** Add File: c.txt", "+c", "*** Update File: a.txt", "-a", "+A", "*** Update File: b.txt", "-nope", "+B"),
		kind:   KindFailed, want: []string{"Failed to find expected lines in b.txt:\nnope", "No files were changed"},
	},
	{
		name:   "missing context",
		before: map[string]string{"a.txt": "a\n"},
		patch:  bp("*** Update File: a.txt", "@@ def missing():", "-a", "+b"),
		kind:   KindFailed, want: []string{"Failed to find context 'def missing():' in a.txt"},
	},
	{
		name:   "mismatch shows the nearby lines",
		before: map[string]string{"a.txt": "one\ntwo\nthree\n"},
		patch:  bp("*** Update File: a.txt", " two", "-tree", "+3"),
		kind:   KindFailed, want: []string{"Failed to find expected lines", "The file's lines 1-3 are:", "   2 | two"},
	},
	{
		name:  "update of a missing file",
		patch: bp("*** Update File: nope.txt", "-a", "+b"),
		kind:  KindFailed, want: []string{"Failed to update file nope.txt: it does not exist"},
	},
	{
		name:   "delete of a directory",
		before: map[string]string{"d/x.txt": "x\n"},
		patch:  bp("*** Delete File: d"),
		kind:   KindFailed,
	},
	{
		name:  "missing begin",
		patch: "*** Add File: a.txt\n+a\n*** End Patch",
		kind:  KindInvalidArguments, want: []string{"Invalid patch: The first line of the patch must be '*** Begin Patch'"},
	},
	{
		name:  "missing end",
		patch: "*** Begin Patch\n*** Add File: a.txt\n+a",
		kind:  KindInvalidArguments, want: []string{"The last line of the patch must be '*** End Patch'"},
	},
	{
		name:  "empty patch",
		patch: "*** Begin Patch\n*** End Patch",
		kind:  KindInvalidArguments, want: []string{"Invalid patch"},
	},
	{
		name:  "bad hunk header",
		patch: bp("*** Frobnicate File: a.txt"),
		kind:  KindInvalidArguments, want: []string{"Invalid patch hunk on line 2: '*** Frobnicate File: a.txt' is not a valid hunk header"},
	},
	{
		name:   "empty update hunk",
		before: map[string]string{"a.txt": "a\n"},
		patch:  bp("*** Update File: a.txt"),
		kind:   KindInvalidArguments, want: []string{"Update file hunk for path 'a.txt' is empty"},
	},
	{
		name:   "bad first line of a chunk",
		before: map[string]string{"a.txt": "a\n"},
		patch:  bp("*** Update File: a.txt", "@@", "xa"),
		kind:   KindInvalidArguments, want: []string{"Unexpected line found in update hunk: 'xa'"},
	},
	{
		name:   "later chunk without @@",
		before: map[string]string{"a.txt": "a\nb\n"},
		patch:  bp("*** Update File: a.txt", "-a", "+A", "garbage"),
		kind:   KindInvalidArguments, want: []string{"Expected update hunk to start with a @@ context marker, got: 'garbage'"},
	},
	{
		name:   "End of File as the first line",
		before: map[string]string{"a.txt": "a\n"},
		patch:  bp("*** Update File: a.txt", "@@", "*** End of File"),
		kind:   KindInvalidArguments, want: []string{"Update hunk does not contain any lines"},
	},
	{
		name:   "path escaping the root",
		before: map[string]string{"a.txt": "a\n"},
		patch:  bp("*** Add File: ../../escape.txt", "+x"),
		kind:   KindFailed,
	},
}

func TestApplyPatch(t *testing.T) {
	for _, tt := range patchCorpus {
		t.Run(tt.name, func(t *testing.T) {
			b := newBox(t)
			for p, c := range tt.before {
				b.write(t, p, c)
			}
			s := b.set("openai", ReadWrite, nil)
			r := run(t, s, "apply_patch", map[string]any{"patch": tt.patch})
			check(t, r, tt.kind, tt.want...)
			want := tt.after
			if want == nil {
				want = tt.before
			}
			if diff := cmp.Diff(want, workspace(t, b)); diff != "" {
				t.Errorf("files (-want +got):\n%s", diff)
			}
		})
	}
}

// workspace reads every regular file under the box, by relative path.
func workspace(t *testing.T, b *box) map[string]string {
	t.Helper()
	r, err := b.client.Walk(t.Context(), &sandboxv1.WalkRequest{SandboxId: b.id})
	if err != nil {
		t.Fatal(err)
	}
	files := map[string]string{}
	for _, f := range r.GetFiles() {
		files[f.GetPath()], _ = b.read(t, f.GetPath())
	}
	if len(files) == 0 {
		return nil
	}
	return files
}

func TestApplyPatchFreeformArguments(t *testing.T) {
	b := newBox(t)
	b.write(t, "a.txt", "a\n")
	s := b.set("gpt6", ReadWrite, nil)
	r := s.Run(t.Context(), Call{Name: "apply_patch", Arguments: bp("*** Update File: a.txt", "-a", "+b")})
	check(t, r, "", "M a.txt")
	if got, _ := b.read(t, "a.txt"); got != "b\n" {
		t.Errorf("file %q", got)
	}
	check(t, s.Run(t.Context(), Call{Name: "apply_patch", Arguments: "not a patch"}), KindInvalidArguments, "not valid JSON")
}

func TestApplyPatchRollsBackAFailedWrite(t *testing.T) {
	b := newBox(t)
	b.write(t, "a.txt", "a\n")
	s := b.set("openai", ReadWrite, nil)
	// Every hunk validates, but writing blk/child fails once blk is a file:
	// the writes already done (a.txt, blk) are undone.
	patch := bp("*** Update File: a.txt", "-a", "+A", "*** Add File: blk", "+file", "*** Add File: blk/child", "+x")
	r := run(t, s, "apply_patch", map[string]any{"patch": patch})
	check(t, r, KindFailed, "blk/child")
	if diff := cmp.Diff(map[string]string{"a.txt": "a\n"}, workspace(t, b)); diff != "" {
		t.Errorf("files (-want +got):\n%s", diff)
	}
}
