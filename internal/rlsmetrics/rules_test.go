package rlsmetrics

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/floodgate/floodgate/internal/statsdtest"
	"github.com/floodgate/floodgate/pkg/rules"
)

const reloadRules = "domain: srv\ndescriptors:\n  - key: user\n    rate_limit: {unit: day, requests_per_unit: 1}\n"

// floodgate_rules_reloads_total counts reloads after the first load: 0
// on a fresh start, 1 after an edit.
func TestReloadMetrics(t *testing.T) {
	dir := t.TempDir()
	path := filepath.Join(dir, "srv.yaml")
	if err := os.WriteFile(path, []byte(reloadRules), 0o644); err != nil {
		t.Fatal(err)
	}
	w, err := rules.NewWatcher(dir, rules.Options{}, nil)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	go w.Run(ctx)
	reg := prometheus.NewRegistry()
	if err := RegisterRuleLoads(reg, w.Status); err != nil {
		t.Fatal(err)
	}
	reloads := func(success, failure float64) error {
		mfs, err := reg.Gather()
		if err != nil {
			return err
		}
		got := map[string]float64{}
		for _, mf := range mfs {
			if mf.GetName() == "floodgate_rules_reloads_total" {
				for _, m := range mf.GetMetric() {
					got[m.GetLabel()[0].GetValue()] = m.GetCounter().GetValue()
				}
			}
		}
		if len(got) != 2 || got["success"] != success || got["failure"] != failure {
			return fmt.Errorf("floodgate_rules_reloads_total %v, want success %v, failure %v", got, success, failure)
		}
		return nil
	}
	// Run's first look at the files, which finds them as NewWatcher
	// loaded them, is no reload.
	for deadline := time.Now().Add(5 * time.Second); !w.Watching(); time.Sleep(5 * time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatal("the watcher did not start watching")
		}
	}
	if err := reloads(0, 0); err != nil {
		t.Errorf("fresh start: %v", err)
	}
	if err := os.WriteFile(path, []byte(strings.Replace(reloadRules, "requests_per_unit: 1", "requests_per_unit: 2", 1)), 0o644); err != nil {
		t.Fatal(err)
	}
	for deadline := time.Now().Add(5 * time.Second); w.Status().Version < 2; time.Sleep(10 * time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatal("the edit was not loaded")
		}
	}
	if err := reloads(1, 0); err != nil {
		t.Errorf("after an edit: %v", err)
	}
}

// TestStatsdRuleLoads: the first load and each good reload count as
// config_load_success, each refused reload as config_load_error, sent as
// what changed since the last flush.
func TestStatsdRuleLoads(t *testing.T) {
	srv := statsdtest.Listen(t)
	client := newStatsdClient(t, srv.Addr())
	var st rules.Status
	StatsdRuleLoads(client, func() rules.Status { return st })
	for _, step := range []struct {
		name             string
		reloads, refused uint64
		want             []string
	}{
		{"the first load", 0, 0, []string{"ratelimit.service.config_load_success:1|c"}},
		{"two good reloads and a refused one", 3, 1, []string{"ratelimit.service.config_load_success:2|c", "ratelimit.service.config_load_error:1|c"}},
		{"nothing new", 3, 1, nil},
		{"a refused reload", 4, 2, []string{"ratelimit.service.config_load_error:1|c"}},
	} {
		st.Reloads, st.Failures = step.reloads, step.refused
		if err := client.Flush(); err != nil {
			t.Fatal(err)
		}
		if got := srv.Lines(t); !slices.Equal(got, step.want) {
			t.Errorf("%s: got %q, want %q", step.name, got, step.want)
		}
	}
}
