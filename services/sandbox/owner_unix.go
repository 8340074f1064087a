//go:build unix

package sandbox

import (
	"os"
	"syscall"
)

// ownerOf returns the uid owning a file.
func ownerOf(fi os.FileInfo) (int, bool) {
	st, ok := fi.Sys().(*syscall.Stat_t)
	if !ok {
		return 0, false
	}
	return int(st.Uid), true
}
