package agent_test

import (
	"io"
	"os"
	"path/filepath"
	"testing"

	agentv1 "github.com/fabro-sh/fabro-go/gen/fabro/agent/v1"
	sandboxv1 "github.com/fabro-sh/fabro-go/gen/fabro/sandbox/v1"
	"github.com/fabro-sh/fabro-go/services/agent/mcptest"
	"github.com/fabro-sh/fabro-go/services/llmgateway/fakeprovider"
)

// TestMCPInSandbox: a stdio MCP server with place sandbox, named by
// CreateSession (settings the agent does not trust with host commands),
// runs as a process of the session's sandbox, spoken to over
// AttachProcess; its tool answers, and the sandbox lists the process.
func TestMCPInSandbox(t *testing.T) {
	st := newStack(t)
	dir, sbID := st.workspace(t, nil)
	// The server is this test binary (its TestMain serves MCP on stdio
	// when asked), copied into the workspace so the sandbox's user runs it.
	bin := filepath.Join(dir, "mcp-server")
	copyFile(t, os.Args[0], bin)
	st.fake.Enqueue(
		fakeprovider.Turn{ToolCalls: []fakeprovider.ToolCall{{ID: "c1", Name: "mcp__boxed__upper", Arguments: args(map[string]any{"text": "inside"})}}},
		fakeprovider.Turn{Text: "done"},
	)
	id := st.session(t, sbID, &agentv1.ToolSettings{McpServers: []*agentv1.McpServer{{
		Name: "boxed", Command: bin, Env: map[string]string{mcptest.ServeEnv: "1"}, Place: agentv1.HookPlace_HOOK_PLACE_SANDBOX}}}, "")
	outs := toolOutputs(st.prompt(t, id, "go"))
	if c := outs["c1"]; c.GetIsError() || c.GetOutput() != "INSIDE" {
		t.Errorf("c1 = %v", c)
	}
	list, err := st.sandbox.ListProcesses(t.Context(), &sandboxv1.ListProcessesRequest{SandboxId: sbID})
	if err != nil {
		t.Fatal(err)
	}
	var found bool
	for _, p := range list.GetProcesses() {
		if args := p.GetSpec().GetArgs(); len(args) > 0 && args[0] == bin && p.GetState() == sandboxv1.ProcessState_PROCESS_STATE_RUNNING {
			found = true
		}
	}
	if !found {
		t.Errorf("the sandbox runs no process of the MCP server: %v", list.GetProcesses())
	}
}

func copyFile(t *testing.T, from, to string) {
	t.Helper()
	src, err := os.Open(from)
	if err != nil {
		t.Fatal(err)
	}
	defer src.Close()
	dst, err := os.OpenFile(to, os.O_CREATE|os.O_WRONLY|os.O_TRUNC, 0o755)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := io.Copy(dst, src); err != nil {
		t.Fatal(err)
	}
	if err := dst.Close(); err != nil {
		t.Fatal(err)
	}
}
