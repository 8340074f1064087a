// Package fabro_test checks the generated contracts as a whole: that they
// register without conflicts and carry their field behaviour.
package fabro_test

import (
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
