package harness

import (
	"bufio"
	"fmt"
	"net"
	"os"
	"path/filepath"
	"strconv"
	"strings"
)

// ListensOn reports whether the process p holds the listening TCP socket
// of addr's port: a program answering on a port taken between FreeAddr
// and p's listen (another test's server, say) does not count. It reads
// Linux's /proc; elsewhere it reports true.
func (p *Process) ListensOn(addr string) (bool, error) {
	if _, err := os.Stat("/proc/net/tcp"); err != nil {
		return true, nil
	}
	_, portText, err := net.SplitHostPort(addr)
	if err != nil {
		return false, err
	}
	port, err := strconv.ParseUint(portText, 10, 16)
	if err != nil {
		return false, fmt.Errorf("port of %s: %w", addr, err)
	}
	inodes := map[string]bool{}
	for _, table := range []string{"/proc/net/tcp", "/proc/net/tcp6"} {
		if err := listeningInodes(table, port, inodes); err != nil {
			return false, err
		}
	}
	fds, err := os.ReadDir(fmt.Sprintf("/proc/%d/fd", p.Pid()))
	if err != nil {
		return false, err
	}
	for _, fd := range fds {
		link, err := os.Readlink(filepath.Join(fmt.Sprintf("/proc/%d/fd", p.Pid()), fd.Name()))
		if inode, ok := strings.CutPrefix(link, "socket:["); err == nil && ok && inodes[strings.TrimSuffix(inode, "]")] {
			return true, nil
		}
	}
	return false, nil
}

// listeningInodes adds to inodes those of the sockets in LISTEN state on
// port in a /proc/net/tcp table (a missing table, no IPv6, holds none).
func listeningInodes(table string, port uint64, inodes map[string]bool) error {
	f, err := os.Open(table)
	if os.IsNotExist(err) {
		return nil
	}
	if err != nil {
		return err
	}
	defer f.Close()
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		// sl local_address rem_address st tx:rx tr:when retrnsmt uid timeout inode
		fields := strings.Fields(sc.Text())
		if len(fields) < 10 || fields[3] != "0A" { // 0A: LISTEN
			continue
		}
		_, hexPort, _ := strings.Cut(fields[1], ":")
		if p, err := strconv.ParseUint(hexPort, 16, 16); err == nil && p == port {
			inodes[fields[9]] = true
		}
	}
	return sc.Err()
}
