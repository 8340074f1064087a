package paging_test

import (
	"errors"
	"fmt"
	"slices"
	"sync"
	"testing"

	"github.com/fabro-sh/fabro-go/platform/paging"
)

type req struct {
	size  int32
	token string
}

func (r req) GetPageSize() int32   { return r.size }
func (r req) GetPageToken() string { return r.token }

func key(s string) []string { return []string{s} }

func TestPageWalksEverything(t *testing.T) {
	var items []string
	for i := range 25 {
		items = append(items, fmt.Sprintf("item-%02d", i))
	}
	var got []string
	tok := ""
	for {
		page, next, err := paging.Page(items, req{size: 7, token: tok}, "f", key, paging.Ascending(key))
		if err != nil {
			t.Fatal(err)
		}
		got = append(got, page...)
		if next == "" {
			break
		}
		tok = next
	}
	if !slices.Equal(got, items) {
		t.Fatalf("got %v", got)
	}
}

// TestConcurrentInserts lists while another goroutine inserts items: every
// item present from the start is seen exactly once.
func TestConcurrentInserts(t *testing.T) {
	var mu sync.Mutex
	var items []string
	for i := range 200 {
		items = append(items, fmt.Sprintf("b-%03d", i))
	}
	original := slices.Clone(items)
	snapshot := func() []string { mu.Lock(); defer mu.Unlock(); return slices.Clone(items) }
	done := make(chan struct{})
	go func() {
		defer close(done)
		for i := range 300 {
			mu.Lock()
			// Inserts land before, between and after the original items.
			items = append(items, fmt.Sprintf("a-%03d", i), fmt.Sprintf("b-%03d-x", i), fmt.Sprintf("c-%03d", i))
			slices.Sort(items)
			mu.Unlock()
		}
	}()
	seen := map[string]int{}
	tok := ""
	for {
		page, next, err := paging.Page(snapshot(), req{size: 9, token: tok}, "", key, paging.Ascending(key))
		if err != nil {
			t.Fatal(err)
		}
		for _, it := range page {
			seen[it]++
		}
		if next == "" {
			break
		}
		tok = next
	}
	<-done
	for _, it := range original {
		if seen[it] != 1 {
			t.Fatalf("%s seen %d times", it, seen[it])
		}
	}
	for it, n := range seen {
		if n != 1 {
			t.Fatalf("%s repeated %d times", it, n)
		}
	}
}

func TestDescending(t *testing.T) {
	items := []string{"e", "d", "c", "b", "a"}
	page, next, _ := paging.Page(items, req{size: 2}, "", key, paging.Descending(key))
	page2, _, err := paging.Page(items, req{size: 2, token: next}, "", key, paging.Descending(key))
	if err != nil || !slices.Equal(page, []string{"e", "d"}) || !slices.Equal(page2, []string{"c", "b"}) {
		t.Fatalf("%v %v %v", page, page2, err)
	}
}

func TestBadInput(t *testing.T) {
	good := paging.Encode(paging.Filter("parent=a"), "x")
	tests := []struct {
		name string
		req  req
		want error
	}{
		{"negative size", req{size: -1}, paging.ErrInvalidSize},
		{"garbage", req{token: "%%%"}, paging.ErrInvalidToken},
		{"base64 of junk", req{token: "aGVsbG8"}, paging.ErrInvalidToken},
		{"offset token of old", req{token: "b2Zmc2V0OjEw"}, paging.ErrInvalidToken},
		{"other filter", req{token: good}, paging.ErrInvalidToken},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			_, _, err := paging.Page([]string{"a"}, tt.req, paging.Filter("parent=b"), key, paging.Ascending(key))
			if !errors.Is(err, tt.want) {
				t.Fatalf("err = %v, want %v", err, tt.want)
			}
		})
	}
	if n, _ := paging.Size(5000); n != paging.MaxSize {
		t.Fatalf("size capped to %d", n)
	}
}
