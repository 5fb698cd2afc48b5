//go:build unix

package server

import "syscall"

// fileLimit returns the process's soft limit of open files (which the Go
// runtime raises to the hard limit at start), or 0 when it is unknown or
// unlimited.
func fileLimit() int {
	var r syscall.Rlimit
	if err := syscall.Getrlimit(syscall.RLIMIT_NOFILE, &r); err != nil || r.Cur == ^uint64(0) || r.Cur > 1<<30 {
		return 0
	}
	return int(r.Cur)
}
