package sandbox_test

import (
	"context"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	sandboxv1 "github.com/fabro-sh/fabro-go/gen/fabro/sandbox/v1"
)

// TestReadFileBounded: ReadFile keeps a bounded part of a file in memory.
// A command's sparse file (600 MiB of zeros, no newline: one "line"; a
// 1 TiB one took 21 GiB of the service's memory before it was killed) is
// refused as no text file; the lines returned fit in a response any client
// takes.
func TestReadFileBounded(t *testing.T) {
	h := start(t)
	sb := h.create(t, &sandboxv1.SandboxSpec{})
	root := sb.GetRootDirectory()
	f, err := os.Create(filepath.Join(root, "sparse"))
	if err != nil || f.Truncate(600<<20) != nil {
		t.Fatalf("the plant: %v", err)
	}
	f.Close()
	if err := os.WriteFile(filepath.Join(root, "wide.txt"), []byte(strings.Repeat(strings.Repeat("y", 4000)+"\n", 2000)), 0o644); err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(t.Context(), 2*time.Minute)
	defer cancel()
	_, err = h.client.ReadFile(ctx, &sandboxv1.ReadFileRequest{SandboxId: sb.GetSandboxId(), Path: "sparse"})
	if status.Code(err) != codes.FailedPrecondition || !strings.Contains(err.Error(), "ReadFileBytes") {
		t.Errorf("ReadFile of a 600 MiB line: %v; want FAILED_PRECONDITION pointing at ReadFileBytes", err)
	}
	resp, err := h.client.ReadFile(ctx, &sandboxv1.ReadFileRequest{SandboxId: sb.GetSandboxId(), Path: "wide.txt"})
	if err != nil {
		t.Fatalf("ReadFile of 2,000 lines of 4,000 bytes: %v", err)
	}
	if n := len(resp.GetContent()); n > 1<<20 || !resp.GetTruncated() || resp.GetTotalLines() != 2000 || resp.GetLineCount() == 0 {
		t.Errorf("ReadFile of 8 MB of lines: %d bytes of content, %d lines of %d, truncated %v; want at most 1 MiB, truncated", n, resp.GetLineCount(), resp.GetTotalLines(), resp.GetTruncated())
	}
}
