//go:build unix && !linux

package main

import "syscall"

// sysProcAttr puts a child in a process group of its own, so that Ctrl-C
// reaches only the demo, which stops its children in order.
func sysProcAttr() *syscall.SysProcAttr {
	return &syscall.SysProcAttr{Setpgid: true}
}

// holder would name the process listening on port; without /proc it
// cannot tell, and the error names the port and its flag only.
func holder(port string) string { return "" }
