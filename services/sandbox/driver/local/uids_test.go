package local_test

import (
	"os/user"
	"testing"

	"github.com/fabro-sh/fabro-go/services/sandbox/driver/local"
)

func TestParseUIDs(t *testing.T) {
	for _, tc := range []struct {
		in string
		ok bool
	}{
		{"100000-165535", true}, {"1-2", true},
		{"", false}, {"5", false}, {"0-10", false}, {"10-10", false}, {"10-5", false}, {"a-b", false}, {"1-4294967295", false},
	} {
		if _, err := local.ParseUIDs(tc.in); (err == nil) != tc.ok {
			t.Errorf("ParseUIDs(%q) = %v; want ok %v", tc.in, err, tc.ok)
		}
	}
}

// A uid is given to one sandbox at a time, held by each of its holders,
// free again once all released it; a real account's uid and the range's
// group are never given.
func TestUIDsTakeHoldRelease(t *testing.T) {
	nobody, err := user.LookupId("65534")
	if err != nil {
		t.Skip("no account with uid 65534 here")
	}
	u := local.NewUIDs(65532, 65535) // 65532 is the group; 65534 is nobody
	a, err1 := u.Take()
	b, err2 := u.Take()
	if err1 != nil || err2 != nil || a != 65533 || b != 65535 {
		t.Fatalf("Take = %d %v, %d %v; want 65533 and 65535 (%s skipped)", a, err1, b, err2, nobody.Username)
	}
	if uid, err := u.Take(); err == nil {
		t.Fatalf("Take with every uid given = %d; want an error", uid)
	}
	u.Hold(a) // a docker sandbox's host-side files
	u.Release(a)
	if uid, err := u.Take(); err == nil {
		t.Fatalf("Take while %d is still held = %d; want an error", a, uid)
	}
	u.Release(a)
	if uid, err := u.Take(); err != nil || uid != a {
		t.Fatalf("Take after release = %d, %v; want %d", uid, err, a)
	}
	if u.Contains(65532) || u.Contains(65536) || !u.Contains(65533) {
		t.Error("Contains: the group and ids out of the range are no sandbox's")
	}
}
