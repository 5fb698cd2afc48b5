package main

import "syscall"

// sysProcAttr puts a child in a process group of its own, so that Ctrl-C
// reaches only the demo, which stops its children in order; and has the
// kernel kill the child if the demo itself dies without stopping it.
func sysProcAttr() *syscall.SysProcAttr {
	return &syscall.SysProcAttr{Setpgid: true, Pdeathsig: syscall.SIGKILL}
}
