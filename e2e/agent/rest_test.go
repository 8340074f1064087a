package agent_test

import (
	"bufio"
	"bytes"
	"encoding/json"
	"fmt"
	"net/http"
	"runtime"
	"testing"

	"google.golang.org/protobuf/encoding/protojson"

	agentv1 "github.com/fabro-sh/fabro-go/gen/fabro/agent/v1"
	"github.com/fabro-sh/fabro-go/services/llmgateway/fakeprovider"
)

// TestREST creates a session and streams a prompt through the real REST
// gateway.
func TestREST(t *testing.T) {
	st := newStack(t)
	_, sbID := st.workspace(t, map[string]string{"a.txt": "alpha\n"})
	st.fake.Enqueue(
		fakeprovider.Turn{ToolCalls: []fakeprovider.ToolCall{{ID: "c1", Name: "read_file", Arguments: args(map[string]any{"file_path": "a.txt"})}}},
		fakeprovider.Turn{Text: "It says alpha."},
	)
	post := func(path, body string) *http.Response {
		t.Helper()
		resp, err := http.Post("http://"+st.httpAddr+path, "application/json", bytes.NewBufferString(body))
		if err != nil {
			t.Fatal(err)
		}
		if resp.StatusCode != http.StatusOK {
			t.Fatalf("POST %s: %s", path, resp.Status)
		}
		return resp
	}
	resp := post("/v1/sessions", fmt.Sprintf(`{"model":"gemini/gemini-2.5-flash","sandboxId":%q}`, sbID))
	var created agentv1.CreateSessionResponse
	var raw json.RawMessage
	if err := json.NewDecoder(resp.Body).Decode(&raw); err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if err := protojson.Unmarshal(raw, &created); err != nil {
		t.Fatal(err)
	}
	id := created.GetSession().GetSessionId()
	resp = post("/v1/sessions/"+id+":prompt", `{"text":"What does a.txt say?"}`)
	defer resp.Body.Close()
	var evs []*agentv1.AgentEvent
	sc := bufio.NewScanner(resp.Body)
	sc.Buffer(make([]byte, 1<<20), 1<<24)
	for sc.Scan() {
		var line struct {
			Result json.RawMessage `json:"result"`
			Error  json.RawMessage `json:"error"`
		}
		if err := json.Unmarshal(sc.Bytes(), &line); err != nil || line.Error != nil {
			t.Fatalf("line %s: %v", sc.Bytes(), err)
		}
		var pr agentv1.PromptResponse
		if err := protojson.Unmarshal(line.Result, &pr); err != nil {
			t.Fatal(err)
		}
		evs = append(evs, pr.GetEvent())
	}
	if rep := lastReport(t, evs); rep.GetStatus() != agentv1.PromptStatus_PROMPT_STATUS_COMPLETED || rep.GetOutput() != "It says alpha." {
		t.Errorf("report = %v", rep)
	}
	checkGapless(t, evs, evs[0].GetSequence())
}

// BenchmarkIdleSessionMemory measures the heap held per idle session
// (route, options, system prompt, tools, event log, empty history).
func BenchmarkIdleSessionMemory(b *testing.B) {
	st := newStack(b)
	_, sbID := st.workspace(b, map[string]string{"AGENTS.md": "Be brief.\n"})
	const n = 200
	for b.Loop() {
		runtime.GC()
		var before, after runtime.MemStats
		runtime.ReadMemStats(&before)
		for range n {
			if _, err := st.agent.CreateSession(b.Context(), &agentv1.CreateSessionRequest{
				Model: "anthropic/claude-sonnet-4.5", Sandbox: &agentv1.CreateSessionRequest_SandboxId{SandboxId: sbID}}); err != nil {
				b.Fatal(err)
			}
		}
		runtime.GC()
		runtime.ReadMemStats(&after)
		b.ReportMetric(float64(after.HeapAlloc-before.HeapAlloc)/n, "heap-B/session")
	}
}
