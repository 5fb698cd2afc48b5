package dropin

import (
	"context"
	"fmt"
	"net"
	"os/exec"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/floodgate/floodgate/internal/harness"
	"github.com/floodgate/floodgate/internal/harness/redistest"
	"github.com/floodgate/floodgate/internal/testlog"
)

// TestPortSpellings: the reference reads its port variables as Go integer
// literals (envconfig parses ints in base 0), so GRPC_PORT=0x1f91 is 8081,
// PORT=010 is 8 and DEBUG_PORT=6_070 is 6070. Both servers run with their
// ports spelled so, and each must listen on the ports they stand for.
func TestPortSpellings(t *testing.T) {
	t.Parallel()
	ref := harness.Require(t, harness.Reference)
	fg := harness.Binary(t)
	r := redistest.Start(t)
	root := t.TempDir()
	writeRules(t, root+"/ratelimit/config", map[string]string{"d.yaml": "domain: d\n"})
	spellings := []struct {
		prefix string
		spell  func(int) string
	}{
		{"GRPC_", func(p int) string { return fmt.Sprintf("%#x", p) }},
		{"", func(p int) string { return fmt.Sprintf("%#o", p) }},
		{"DEBUG_", func(p int) string { s := strconv.Itoa(p); return s[:1] + "_" + s[1:] }},
	}
	for _, bin := range []string{ref, fg} {
		for attempt := 1; ; attempt++ {
			env := harness.ReferenceVars(root, r.Addr)
			var addrs []string
			for _, s := range spellings {
				port := harness.FreePort(t)
				env = append(env, s.prefix+"HOST=127.0.0.1", s.prefix+"PORT="+s.spell(port))
				addrs = append(addrs, net.JoinHostPort("127.0.0.1", strconv.Itoa(port)))
			}
			logs, err := listenOn(bin, env, addrs)
			if err != nil && attempt < harness.PortAttempts && harness.PortTaken(logs) {
				continue
			}
			if err != nil {
				t.Errorf("%s with %s: %v\n%s", bin, strings.Join(env[len(env)-6:], " "), err, logs)
			}
			break
		}
	}
}

// listenOn runs bin with env until it holds a listening socket on each of
// addrs, and returns what it wrote.
func listenOn(bin string, env, addrs []string) (string, error) {
	logs := &testlog.Buffer{}
	cmd := exec.Command(bin)
	cmd.Env, cmd.Stdout, cmd.Stderr = env, logs, logs
	p, err := harness.StartProcess(bin, cmd)
	if err != nil {
		return "", err
	}
	defer p.Stop(5 * time.Second)
	err = harness.WaitReady(context.Background(), p, 30*time.Second, func(context.Context) error {
		for _, a := range addrs {
			if ok, err := p.ListensOn(a); !ok {
				return fmt.Errorf("not listening on %s (%v)", a, err)
			}
		}
		return nil
	})
	return logs.String(), err
}
