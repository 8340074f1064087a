package local

import (
	"fmt"
	"math"
	"os/user"
	"strconv"
	"strings"
	"sync"
)

// UIDs is a range of host uids the service gives sandboxes, one each, so
// that no sandbox's commands (or the host-side searches made for it) can
// read another's workspace: a managed workspace is owned by its
// sandbox's uid, mode 0700. The first id of the range is no sandbox's: it
// is the group every sandbox uid has as a supplementary group, which alone
// is granted search (not listing) on the directories above the
// workspaces, once, so that no grant is made per sandbox. Ids with a
// passwd entry are skipped: a sandbox never gets a real account's uid.
// One range serves one service: two services on one host need ranges of
// their own.
type UIDs struct {
	first, last uint32

	mu   sync.Mutex
	refs map[uint32]int // uid -> holders (a docker sandbox and its host-side files)
	next uint32
}

// ParseUIDs parses "FIRST-LAST", a range of at least two ids above 0.
func ParseUIDs(s string) (*UIDs, error) {
	a, b, ok := strings.Cut(s, "-")
	first, err1 := strconv.ParseUint(strings.TrimSpace(a), 10, 32)
	last, err2 := strconv.ParseUint(strings.TrimSpace(b), 10, 32)
	// Docker (and much else) takes uids as signed 32-bit numbers.
	if !ok || err1 != nil || err2 != nil || first == 0 || last <= first || last > math.MaxInt32 {
		return nil, fmt.Errorf("uid range %q: want FIRST-LAST, 0 < FIRST < LAST <= %d", s, math.MaxInt32)
	}
	return NewUIDs(uint32(first), uint32(last)), nil
}

// NewUIDs returns the range first..last.
func NewUIDs(first, last uint32) *UIDs {
	return &UIDs{first: first, last: last, refs: map[uint32]int{}, next: first + 1}
}

// Bounds are the range's first and last ids.
func (u *UIDs) Bounds() (first, last uint32) { return u.first, u.last }

// Group is the group id every sandbox uid of the range is a member of.
func (u *UIDs) Group() uint32 { return u.first }

// Contains reports whether uid is a sandbox uid of the range.
func (u *UIDs) Contains(uid uint32) bool { return u != nil && uid > u.first && uid <= u.last }

// Take gives out a uid no sandbox holds, skipping real accounts.
func (u *UIDs) Take() (uint32, error) {
	u.mu.Lock()
	defer u.mu.Unlock()
	n := u.last - u.first
	for range n {
		uid := u.next
		if u.next++; u.next > u.last {
			u.next = u.first + 1
		}
		if u.refs[uid] > 0 {
			continue
		}
		if _, err := user.LookupId(strconv.FormatUint(uint64(uid), 10)); err == nil {
			continue
		}
		u.refs[uid] = 1
		return uid, nil
	}
	return 0, fmt.Errorf("every uid of %d-%d is a sandbox's", u.first, u.last)
}

// Hold counts one more holder of uid, a sandbox reopened on a workspace it
// owns; it does nothing for a uid out of the range.
func (u *UIDs) Hold(uid uint32) {
	if !u.Contains(uid) {
		return
	}
	u.mu.Lock()
	u.refs[uid]++
	u.mu.Unlock()
}

// Release drops one holder of uid; with none left it can be given out again.
func (u *UIDs) Release(uid uint32) {
	if !u.Contains(uid) {
		return
	}
	u.mu.Lock()
	if u.refs[uid]--; u.refs[uid] <= 0 {
		delete(u.refs, uid)
	}
	u.mu.Unlock()
}
