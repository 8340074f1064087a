package agent_test

import (
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/reflect/protodesc"
	"google.golang.org/protobuf/reflect/protoreflect"
	"google.golang.org/protobuf/types/descriptorpb"

	agentv1 "github.com/fabro-sh/fabro-go/gen/fabro/agent/v1"
	"github.com/fabro-sh/fabro-go/services/llmgateway/fakeprovider"
)

// descriptorSet is agent.proto and its imports, dependencies first.
func descriptorSet() *descriptorpb.FileDescriptorSet {
	fds := &descriptorpb.FileDescriptorSet{}
	seen := map[string]bool{}
	var add func(fd protoreflect.FileDescriptor)
	add = func(fd protoreflect.FileDescriptor) {
		if seen[fd.Path()] {
			return
		}
		seen[fd.Path()] = true
		imps := fd.Imports()
		for i := range imps.Len() {
			add(imps.Get(i).FileDescriptor)
		}
		fds.File = append(fds.File, protodesc.ToFileDescriptorProto(fd))
	}
	add(agentv1.File_fabro_agent_v1_agent_proto)
	return fds
}

// TestClientToolFromPython serves a client tool from another language:
// a Python client (Debian's python3-grpcio, installed by make deps) follows
// the session's events and answers with SubmitToolResult.
func TestClientToolFromPython(t *testing.T) {
	if out, err := exec.Command(debianPython, "-c", "import grpc, google.protobuf").CombinedOutput(); err != nil {
		t.Fatalf("python3 with grpcio and protobuf is required (make deps installs python3-grpcio and python3-protobuf): %v: %s", err, out)
	}
	st := newStack(t)
	_, sbID := st.workspace(t, nil)
	st.fake.Enqueue(
		fakeprovider.Turn{ToolCalls: []fakeprovider.ToolCall{{ID: "c1", Name: "ask_user", Arguments: args(map[string]any{"question": "color?"})}}},
		fakeprovider.Turn{Text: "done"},
	)
	created, err := st.agent.CreateSession(t.Context(), &agentv1.CreateSessionRequest{
		Model: "anthropic/claude-sonnet-4.5", Sandbox: &agentv1.CreateSessionRequest_SandboxId{SandboxId: sbID},
		ClientTools: []*agentv1.ClientTool{{Name: "ask_user", Description: "Ask the person at the client a question.",
			Parameters: `{"type":"object","properties":{"question":{"type":"string"}},"required":["question"]}`}},
	})
	if err != nil {
		t.Fatal(err)
	}
	id := created.GetSession().GetSessionId()
	b, err := proto.Marshal(descriptorSet())
	if err != nil {
		t.Fatal(err)
	}
	desc := filepath.Join(t.TempDir(), "agent.binpb")
	if err := os.WriteFile(desc, b, 0o600); err != nil {
		t.Fatal(err)
	}
	py := exec.CommandContext(t.Context(), debianPython, "testdata/client_tool.py", st.grpcAddr, id, desc)
	var stdout, stderr strings.Builder
	py.Stdout, py.Stderr = &stdout, &stderr
	if err := py.Start(); err != nil {
		t.Fatal(err)
	}
	evs := st.prompt(t, id, "ask the user")
	if err := py.Wait(); err != nil {
		t.Fatalf("python client: %v\n%s", err, stderr.String())
	}
	if c := toolOutputs(evs)["c1"]; c.GetIsError() || c.GetOutput() != "python says: ?roloc" {
		t.Errorf("c1 = %v; python said %q %q", c, stdout.String(), stderr.String())
	}
}

// debianPython is Debian's interpreter, which python3-grpcio is for (a
// python3 earlier on PATH, such as pyenv's, does not see it).
const debianPython = "/usr/bin/python3"
