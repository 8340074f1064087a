// Package fabro_test checks the generated contracts as a whole: that they
// register without conflicts and carry their field behaviour.
package fabro_test

import (
	"fmt"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"testing"

	"google.golang.org/genproto/googleapis/api/annotations"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/reflect/protoreflect"
	"google.golang.org/protobuf/reflect/protoregistry"

	// Every generated package: importing them all in one binary is what
	// would panic if google/api/field_behavior.proto were registered twice.
	_ "github.com/fabro-sh/fabro-go/gen/fabro/agent/v1"
	_ "github.com/fabro-sh/fabro-go/gen/fabro/auth/v1"
	_ "github.com/fabro-sh/fabro-go/gen/fabro/llm/v1"
	_ "github.com/fabro-sh/fabro-go/gen/fabro/sandbox/plugin/v1"
	_ "github.com/fabro-sh/fabro-go/gen/fabro/sandbox/v1"
	_ "github.com/fabro-sh/fabro-go/gen/fabro/vault/v1"
)

// TestFieldBehaviorIsGenproto checks that our files import the one
// field_behavior.proto genproto registers, and that a REQUIRED annotation
// reads back through genproto's extension.
func TestFieldBehaviorIsGenproto(t *testing.T) {
	fd, err := protoregistry.GlobalFiles.FindFileByPath("google/api/field_behavior.proto")
	if err != nil {
		t.Fatal(err)
	}
	if annotations.E_FieldBehavior.TypeDescriptor().ParentFile().Path() != fd.Path() {
		t.Fatalf("the extension is not registered from %s", fd.Path())
	}
	d, err := protoregistry.GlobalFiles.FindDescriptorByName("fabro.vault.v1.GetSecretRequest")
	if err != nil {
		t.Fatal(err)
	}
	name := d.(protoreflect.MessageDescriptor).Fields().ByName("name")
	got := proto.GetExtension(name.Options(), annotations.E_FieldBehavior).([]annotations.FieldBehavior)
	if len(got) != 1 || got[0] != annotations.FieldBehavior_REQUIRED {
		t.Fatalf("GetSecretRequest.name field_behavior = %v, want [REQUIRED]", got)
	}
}

// behaviourPrefixes are the ways a request field's comment may start.
var behaviourPrefixes = []string{"Required.", "Optional.", "Output only.", "Immutable."}

// TestRequestFieldBehaviour checks the contract convention on the
// non-agent protos: every field of a request message (and of the specs
// requests carry) has a comment starting with one behaviour, and exactly
// the "Required." ones carry (google.api.field_behavior) = REQUIRED.
func TestRequestFieldBehaviour(t *testing.T) {
	var files []string
	for _, dir := range []string{"llm", "vault", "sandbox/v1", "auth"} {
		m, err := filepath.Glob(filepath.Join("..", "..", "proto", "fabro", dir, "*", "*.proto"))
		if err != nil {
			t.Fatal(err)
		}
		m2, _ := filepath.Glob(filepath.Join("..", "..", "proto", "fabro", dir, "*.proto"))
		files = append(append(files, m...), m2...)
	}
	if len(files) < 5 {
		t.Fatalf("found only %v", files)
	}
	extra := map[string]bool{"ExecSpec": true, "SandboxSpec": true}
	messageRE := regexp.MustCompile(`^message (\w+) \{`)
	fieldRE := regexp.MustCompile(`^  (?:repeated |optional )?(?:map<[^>]+>|[\w.]+) (\w+) = \d+`)
	checked := 0
	for _, f := range files {
		b, err := os.ReadFile(f)
		if err != nil {
			t.Fatal(err)
		}
		var msg, comment string
		inComment := false
		for line := range strings.SplitSeq(string(b), "\n") {
			if m := messageRE.FindStringSubmatch(line); m != nil {
				msg = m[1]
				if !strings.HasSuffix(msg, "Request") && !extra[msg] {
					msg = ""
				}
				continue
			}
			if line == "}" {
				msg = ""
			}
			if msg == "" {
				continue
			}
			if c, ok := strings.CutPrefix(line, "  // "); ok {
				if !inComment {
					comment = c
				}
				inComment = true
				continue
			}
			inComment = false
			m := fieldRE.FindStringSubmatch(line)
			if m == nil {
				continue
			}
			checked++
			where := fmt.Sprintf("%s: %s.%s", filepath.Base(f), msg, m[1])
			if !slices.ContainsFunc(behaviourPrefixes, func(p string) bool { return strings.HasPrefix(comment, p) }) {
				t.Errorf("%s: comment %q starts with none of %v", where, comment, behaviourPrefixes)
			}
			required := strings.HasPrefix(comment, "Required.")
			annotated := strings.Contains(line, "(google.api.field_behavior) = REQUIRED")
			if required != annotated {
				t.Errorf("%s: comment says required %v, REQUIRED annotation %v", where, required, annotated)
			}
			comment = ""
		}
	}
	if checked < 50 {
		t.Errorf("checked only %d request fields: the parser misses some", checked)
	}
}
