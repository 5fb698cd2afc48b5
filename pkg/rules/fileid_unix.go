//go:build unix

package rules

import (
	"os"
	"strconv"
	"syscall"
)

// fileID tells the file fi describes from another at the same path with
// the same size and modification time: its device and inode, which a file
// that replaced it (renamed over it, in a tree swapped in) does not share
// whatever time it carries. "" when the system gives neither.
func fileID(fi os.FileInfo) string {
	st, ok := fi.Sys().(*syscall.Stat_t)
	if !ok {
		return ""
	}
	return strconv.FormatUint(uint64(st.Dev), 10) + ":" + strconv.FormatUint(uint64(st.Ino), 10)
}
