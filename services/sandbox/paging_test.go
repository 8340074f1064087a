package sandbox_test

import (
	"context"
	"fmt"
	"io"
	"net/http"
	"slices"
	"strings"
	"sync"
	"testing"

	"github.com/google/go-cmp/cmp"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/testing/protocmp"

	sandboxv1 "github.com/fabro-sh/fabro-go/gen/fabro/sandbox/v1"
	"github.com/fabro-sh/fabro-go/platform/grpcerr"
)

// TestListSandboxesPagesUnderConcurrentCreates pages through the sandboxes
// two at a time while others are created and deleted, between pages and
// from a creator running throughout: every sandbox that existed throughout
// is listed exactly once, oldest first.
func TestListSandboxesPagesUnderConcurrentCreates(t *testing.T) {
	h := start(t)
	ctx := t.Context()
	labels := map[string]string{"run": "paging"}
	var throughout []string
	for range 9 {
		throughout = append(throughout, h.create(t, &sandboxv1.SandboxSpec{Labels: labels}).GetSandboxId())
	}

	stop := make(chan struct{})
	var wg sync.WaitGroup
	wg.Go(func() { // creates sandboxes and deletes every other one it made
		for i := 0; ; i++ {
			select {
			case <-stop:
				return
			default:
			}
			resp, err := h.client.CreateSandbox(ctx, &sandboxv1.CreateSandboxRequest{Spec: &sandboxv1.SandboxSpec{Driver: "local", Labels: labels}})
			if err != nil {
				t.Error(err)
				return
			}
			if i%2 == 0 {
				if _, err := h.client.DeleteSandbox(ctx, &sandboxv1.DeleteSandboxRequest{SandboxId: resp.GetSandbox().GetSandboxId()}); err != nil {
					t.Error(err)
					return
				}
			}
		}
	})

	seen := map[string]int{}
	var listed []*sandboxv1.Sandbox
	token := ""
	for {
		resp, err := h.client.ListSandboxes(ctx, &sandboxv1.ListSandboxesRequest{Labels: labels, PageSize: 2, PageToken: token})
		if err != nil {
			t.Fatal(err)
		}
		for _, sb := range resp.GetSandboxes() {
			seen[sb.GetSandboxId()]++
			listed = append(listed, sb)
		}
		if token = resp.GetNextPageToken(); token == "" {
			break
		}
		// Between pages: one more, and one of the creator's gone.
		h.create(t, &sandboxv1.SandboxSpec{Labels: labels})
	}
	close(stop)
	wg.Wait()

	for _, id := range throughout {
		if seen[id] != 1 {
			t.Errorf("%s listed %d times, want once", id, seen[id])
		}
	}
	for id, n := range seen {
		if n > 1 {
			t.Errorf("%s listed %d times", id, n)
		}
	}
	if !slices.IsSortedFunc(listed, func(a, b *sandboxv1.Sandbox) int {
		return a.GetCreateTime().AsTime().Compare(b.GetCreateTime().AsTime())
	}) {
		t.Error("sandboxes are not listed oldest first")
	}
	var firstNine []string
	for _, sb := range listed[:9] {
		firstNine = append(firstNine, sb.GetSandboxId())
	}
	if diff := cmp.Diff(throughout, firstNine); diff != "" {
		t.Errorf("the sandboxes there from the start, oldest first (-want +got):\n%s", diff)
	}
}

// TestListDirectoryPages pages a directory listing by path.
func TestListDirectoryPages(t *testing.T) {
	h := start(t)
	ctx := context.Background()
	id := h.create(t, &sandboxv1.SandboxSpec{}).GetSandboxId()
	var want []string
	for i := range 7 {
		p := fmt.Sprintf("f%d.txt", i)
		if _, err := h.client.WriteFile(ctx, &sandboxv1.WriteFileRequest{SandboxId: id, Path: p, Content: []byte("x")}); err != nil {
			t.Fatal(err)
		}
		want = append(want, p)
	}
	var got []string
	for token, pages := "", 0; ; pages++ {
		resp, err := h.client.ListDirectory(ctx, &sandboxv1.ListDirectoryRequest{SandboxId: id, PageSize: 3, PageToken: token})
		if err != nil {
			t.Fatal(err)
		}
		for _, e := range resp.GetEntries() {
			got = append(got, e.GetPath())
		}
		if token = resp.GetNextPageToken(); token == "" {
			if pages != 2 {
				t.Errorf("%d pages of 3 for 7 entries, want 3", pages+1)
			}
			break
		}
		if pages == 0 { // a file before the cursor does not shift the next page
			if _, err := h.client.WriteFile(ctx, &sandboxv1.WriteFileRequest{SandboxId: id, Path: "a.txt", Content: []byte("x")}); err != nil {
				t.Fatal(err)
			}
		}
	}
	if diff := cmp.Diff(want, got); diff != "" {
		t.Errorf("entries (-want +got):\n%s", diff)
	}
	// A token is for the listing it came from: another depth refuses it.
	first, err := h.client.ListDirectory(ctx, &sandboxv1.ListDirectoryRequest{SandboxId: id, PageSize: 1})
	if err != nil {
		t.Fatal(err)
	}
	_, err = h.client.ListDirectory(ctx, &sandboxv1.ListDirectoryRequest{SandboxId: id, Depth: 2, PageToken: first.GetNextPageToken()})
	if v := grpcerr.ViolationsOf(err); status.Code(err) != codes.InvalidArgument || len(v) != 1 || v[0].GetField() != "page_token" {
		t.Errorf("token of depth 1 at depth 2: %v, want INVALID_ARGUMENT on page_token", err)
	}
}

// TestGetDriver describes one driver as ListDrivers does.
func TestGetDriver(t *testing.T) {
	h := start(t)
	list, err := h.client.ListDrivers(t.Context(), &sandboxv1.ListDriversRequest{})
	if err != nil {
		t.Fatal(err)
	}
	got, err := h.client.GetDriver(t.Context(), &sandboxv1.GetDriverRequest{DriverId: "local"})
	if err != nil {
		t.Fatal(err)
	}
	if len(list.GetDrivers()) != 1 {
		t.Fatalf("ListDrivers = %v, want local alone", list)
	}
	if diff := cmp.Diff(list.GetDrivers()[0], got.GetDriver(), protocmp.Transform()); diff != "" {
		t.Errorf("GetDriver(local) (-listed +got):\n%s", diff)
	}
	// Over REST, by its route.
	resp, err := http.Get(h.http + "/v1/sandboxDrivers/local")
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	body, _ := io.ReadAll(resp.Body)
	if resp.StatusCode != http.StatusOK || !strings.Contains(string(body), `"driverId":"local"`) {
		t.Errorf("GET /v1/sandboxDrivers/local: %d %s", resp.StatusCode, body)
	}
}
