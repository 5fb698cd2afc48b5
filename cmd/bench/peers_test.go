package main

import (
	"bytes"
	"context"
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/floodgate/floodgate/internal/harness"
)

// TestPeers runs the -peers mode briefly on two floodgate builds, each with
// a private Redis: every scenario of every round measures both, and the
// summary gives each its medians and its ratios to the first. It keeps the
// mode from rotting; it asserts no performance figure.
func TestPeers(t *testing.T) {
	harness.Require(t, "redis-server")
	harness.Require(t, "go")
	bin := filepath.Join(t.TempDir(), "floodgate")
	if err := harness.Build(context.Background(), bin); err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	var stdout, stderr bytes.Buffer
	code := run(ctx, []string{
		"-peers", "a=floodgate:" + bin + ",b=floodgate:" + bin, "-rounds", "2", "-matrix", "-matrix-concurrency", "4",
		"-conns", "1", "-keys", "10", "-warmup", "200ms", "-duration", "500ms", "-json",
	}, &stdout, &stderr)
	if code != 0 {
		t.Fatalf("exit code %d\nstderr:\n%s", code, stderr.String())
	}
	var rep peerReport
	if err := json.Unmarshal(stdout.Bytes(), &rep); err != nil {
		t.Fatalf("output is not a peer report: %v\n%s", err, stdout.String())
	}
	const scenarios = 4 // under/over x 1/3 descriptors
	if len(rep.Runs) != 2*2*scenarios || len(rep.Summary) != 2*scenarios {
		t.Fatalf("%d runs and %d summary rows, want %d and %d", len(rep.Runs), len(rep.Summary), 2*2*scenarios, 2*scenarios)
	}
	for _, r := range rep.Runs {
		if r.Decisions <= 0 || r.Errors != 0 || r.Server == nil || r.Redis == nil || r.Redis.CPUMicrosPerDecision <= 0 {
			t.Errorf("run %s round %d %s: %d decisions, %d errors, server %+v, redis %+v; want decisions, no error, CPU of both",
				r.Peer, r.Round, r.Scenario, r.Decisions, r.Errors, r.Server, r.Redis)
		}
		// Over the limit each of the 10 keys admits one hit per second
		// window, and the run touches at most DurationSec+2 of them.
		over := int64(r.OverLimitShare*float64(r.Decisions) + 0.5)
		allowed := int64(r.Scenario.Keys) * (int64(r.DurationSec) + 2)
		switch {
		case r.Scenario.Limit == limitUnder && over != 0:
			t.Errorf("run %s %s: %d decisions over a limit never reached", r.Peer, r.Scenario, over)
		case r.Scenario.Limit == limitOver && over < r.Decisions-allowed:
			t.Errorf("run %s %s: %d of %d decisions over the limit, want at least all but %d", r.Peer, r.Scenario, over, r.Decisions, allowed)
		}
	}
	for _, row := range rep.Summary {
		if row.Peer == "a" && (row.CPURatio.Median != 1 || row.RateRatio.Median != 1) {
			t.Errorf("first peer's ratios to itself %+v %+v, want 1", row.CPURatio, row.RateRatio)
		}
		if row.CPURatio.Median <= 0 || row.TotalCPU.Median <= row.ServerCPU.Median {
			t.Errorf("row %s %s: ratio %+v, total %+v, server %+v", row.Peer, row.Scenario, row.CPURatio, row.TotalCPU, row.ServerCPU)
		}
	}
	var table bytes.Buffer
	writePeerTable(&table, &rep)
	if n := strings.Count(table.String(), "\n| "); n != 2*scenarios+1 {
		t.Errorf("table has %d rows, want %d:\n%s", n, 2*scenarios+1, table.String())
	}
}

// TestLimitadorLimits: the generated limits give Limitador the other
// servers' counters, one per value of each descriptor key, and a limit on
// a later descriptor applies only to requests that have it.
func TestLimitadorLimits(t *testing.T) {
	path := filepath.Join(t.TempDir(), "limits.yaml")
	if err := writeLimitadorLimits(path, ruleSpec{maxDescriptors: 2}); err != nil {
		t.Fatal(err)
	}
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	want := `- namespace: bench-under
  max_value: 1000000000
  seconds: 1
  conditions: []
  variables: ["descriptors[0]['key1']"]
- namespace: bench-under
  max_value: 1000000000
  seconds: 1
  conditions: ["size(descriptors) > 1"]
  variables: ["descriptors[1]['key2']"]
- namespace: bench-over
  max_value: 1
  seconds: 1
  conditions: []
  variables: ["descriptors[0]['key1']"]
- namespace: bench-over
  max_value: 1
  seconds: 1
  conditions: ["size(descriptors) > 1"]
  variables: ["descriptors[1]['key2']"]
`
	if string(b) != want {
		t.Errorf("limits:\n%s\nwant:\n%s", b, want)
	}
}
