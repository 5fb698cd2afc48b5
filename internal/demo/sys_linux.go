package main

import (
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
)

// sysProcAttr puts a child in a process group of its own, so that Ctrl-C
// reaches only the demo, which stops its children in order; and has the
// kernel kill the child if the demo itself dies without stopping it.
func sysProcAttr() *syscall.SysProcAttr {
	return &syscall.SysProcAttr{Setpgid: true, Pdeathsig: syscall.SIGKILL}
}

// holder names the process listening on the TCP port: "pid N (its
// command line)", or for a program of go run (the quick start's server),
// the go command that runs it; "" when /proc does not tell (a process of
// another user).
func holder(port string) string {
	p, err := strconv.Atoi(port)
	if err != nil {
		return ""
	}
	sockets := map[string]bool{}
	for _, table := range []string{"/proc/net/tcp", "/proc/net/tcp6"} {
		b, _ := os.ReadFile(table)
		for _, l := range strings.Split(string(b), "\n") {
			// sl local_address rem_address st ... inode: state 0A is LISTEN.
			f := strings.Fields(l)
			if len(f) > 9 && f[3] == "0A" && strings.HasSuffix(f[1], fmt.Sprintf(":%04X", p)) {
				sockets["socket:["+f[9]+"]"] = true
			}
		}
	}
	fds, _ := filepath.Glob("/proc/[0-9]*/fd/*")
	for _, fd := range fds {
		if link, err := os.Readlink(fd); err == nil && sockets[link] {
			pid := strings.Split(fd, "/")[2]
			return describeProcess(pid)
		}
	}
	return ""
}

// describeProcess is "pid N (command line)", or the go command's when it
// is the parent: go run's program lives in the build cache, by a name that
// says nothing.
func describeProcess(pid string) string {
	stat, _ := os.ReadFile("/proc/" + pid + "/stat")
	// pid (comm) state ppid ...: comm may hold spaces, not ") ".
	if _, rest, ok := strings.Cut(string(stat), ") "); ok {
		if f := strings.Fields(rest); len(f) > 1 {
			parent := commandLine(f[1])
			if args := strings.Fields(parent); len(args) > 0 && filepath.Base(args[0]) == "go" {
				return fmt.Sprintf("%s (pid %s, running pid %s)", parent, f[1], pid)
			}
		}
	}
	return fmt.Sprintf("pid %s (%s)", pid, commandLine(pid))
}

// commandLine is a process's arguments joined by spaces, cut at 100 bytes.
func commandLine(pid string) string {
	b, _ := os.ReadFile("/proc/" + pid + "/cmdline")
	s := strings.TrimSpace(strings.ReplaceAll(string(b), "\x00", " "))
	if len(s) > 100 {
		s = s[:100] + "…"
	}
	return s
}
