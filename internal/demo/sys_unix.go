//go:build unix && !linux

package main

import "syscall"

// sysProcAttr puts a child in a process group of its own, so that Ctrl-C
// reaches only the demo, which stops its children in order.
func sysProcAttr() *syscall.SysProcAttr {
	return &syscall.SysProcAttr{Setpgid: true}
}
