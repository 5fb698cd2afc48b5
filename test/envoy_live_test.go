package test

import (
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

// liveEditBound is how soon after a rule file is written Envoy's answers
// must follow it: the README promises a change applies within a second.
const liveEditBound = time.Second

// brokenWatch is how long answers are watched after a broken edit once
// floodgate has refused it: a reload that went through anyway would show
// within this time.
const brokenWatch = 300 * time.Millisecond

// liveClient is the client address of the live-edit test; its rule is the
// one edited.
const liveClient = "198.51.100.20"

// liveRule is a rule file limiting liveClient to n per unit.
func liveRule(unit string, n int) string {
	return fmt.Sprintf("domain: demo\ndescriptors:\n  - key: remote_address\n    value: %s\n"+
		"    rate_limit: {unit: %s, requests_per_unit: %d}\n", liveClient, unit, n)
}

// TestEnvoyLiveEdit edits the rules of a floodgate that Envoy asks while a
// client sends requests through Envoy without pause: a good edit (a limit
// raised, a client blocked, a client let through again while another file
// is broken) shows in the status and X-RateLimit-Limit the client gets
// within liveEditBound of the write; a broken edit changes no answer, is
// counted as a refused reload, and leaves the rules version alone.
func TestEnvoyLiveEdit(t *testing.T) {
	t.Parallel() // a bound of a second against about 0.1 s tolerates company
	// Edits in order, each on the state the previous one left. A want of
	// "" marks a broken edit: the answer must stay what it was. A file
	// content of "" deletes the file.
	edits := []struct {
		name  string
		files map[string]string
		want  string
	}{
		{"raise the limit", map[string]string{"live.yaml": liveRule("second", 2000000)}, "200 2000000, 2000000;w=1"},
		// On Redis the 429s come from the deny cache too: a reload must
		// flush it, or the last edit below would keep answering 429.
		{"block the client", map[string]string{"live.yaml": liveRule("second", 0)}, "429 0, 0;w=1"},
		{"broken: unknown unit", map[string]string{"live.yaml": liveRule("fortnight", 5)}, ""},
		{"broken: a second file that is not YAML", map[string]string{"live.yaml": liveRule("second", 0), "other.yaml": "domain: [demo\n"}, ""},
		{"let the client through, fixing both files", map[string]string{"live.yaml": liveRule("minute", 1000000), "other.yaml": ""}, "200 1000000, 1000000;w=60"},
	}
	for _, b := range backends {
		t.Run(b.name, func(t *testing.T) {
			dir := t.TempDir()
			writeRules(t, dir, map[string]string{"live.yaml": liveRule("second", 1000000)})
			args, _ := b.args(t)
			p := start(t, options{args: append(args, "-config", dir)})
			f := startEnvoy(t, nil, p.GRPCAddr)

			answer := f.ask(liveClient).answer
			if answer != "200 1000000, 1000000;w=1" {
				t.Fatalf("before any edit Envoy answers %q", answer)
			}
			version := p.metric("floodgate_rules_version")
			for _, e := range edits {
				refused := p.metric(`floodgate_rules_reloads_total{result="failure"}`)
				written := writeEdit(t, dir, e.files)
				if e.want == "" {
					watchUnchanged(t, f, p, e.name, answer, written, refused)
					if got := p.metric("floodgate_rules_version"); got != version {
						t.Errorf("%s: rules version %v, want %v: the refused edit replaced the rules", e.name, got, version)
					}
					continue
				}
				delay := waitAnswer(t, f, e.name, answer, e.want, written)
				t.Logf("%s: Envoy answered %q %v after the write", e.name, e.want, delay.Round(time.Millisecond))
				answer = e.want
				version++
				if got := p.metric("floodgate_rules_version"); got != version {
					t.Errorf("%s: rules version %v, want %v", e.name, got, version)
				}
			}
		})
	}
}

// writeEdit writes files into dir atomically (deleting those given as "")
// and returns when the last change was made.
func writeEdit(t *testing.T, dir string, files map[string]string) time.Time {
	t.Helper()
	for name, content := range files {
		if content == "" {
			if err := os.Remove(filepath.Join(dir, name)); err != nil {
				t.Fatal(err)
			}
			continue
		}
		writeRules(t, dir, map[string]string{name: content})
	}
	return time.Now()
}

// waitAnswer sends requests through Envoy one after the other until one is
// answered want, and returns how long after written that answer came. Until
// then every answer must be before (the rules are swapped whole, never
// half); after it, the next answers must stay want.
func waitAnswer(t *testing.T, f *envoyFront, edit, before, want string, written time.Time) time.Duration {
	t.Helper()
	for {
		o := f.ask(liveClient)
		done := o.start.Add(o.took)
		switch o.answer {
		case want:
			delay := done.Sub(written)
			if delay > liveEditBound {
				t.Errorf("%s: Envoy answered %q only %v after the write, want within %v", edit, want, delay, liveEditBound)
			}
			for range 10 {
				if got := f.ask(liveClient).answer; got != want {
					t.Fatalf("%s: Envoy answered %q after %q: the edit did not stay in force", edit, got, want)
				}
			}
			return delay
		case before:
		default:
			t.Fatalf("%s: Envoy answered %q while the edit was applied, want %q then %q", edit, o.answer, before, want)
		}
		if done.Sub(written) > 5*liveEditBound {
			t.Fatalf("%s: Envoy still answers %q %v after the write, want %q within %v", edit, o.answer, done.Sub(written), want, liveEditBound)
		}
		time.Sleep(5 * time.Millisecond)
	}
}

// watchUnchanged sends requests through Envoy one after the other from a
// broken edit's write until brokenWatch after floodgate refused it, and
// fails on any answer other than before. Floodgate must refuse the edit
// within liveEditBound, or the test would prove nothing.
func watchUnchanged(t *testing.T, f *envoyFront, p *proc, edit, before string, written time.Time, refusedBefore float64) {
	t.Helper()
	var refusedAt time.Time
	for refusedAt.IsZero() || time.Since(refusedAt) < brokenWatch {
		if got := f.ask(liveClient).answer; got != before {
			t.Fatalf("%s: Envoy answered %q after the broken edit, want %q as before", edit, got, before)
		}
		if refusedAt.IsZero() {
			if p.metric(`floodgate_rules_reloads_total{result="failure"}`) > refusedBefore {
				refusedAt = time.Now()
				t.Logf("%s: refused %v after the write", edit, refusedAt.Sub(written).Round(time.Millisecond))
			} else if time.Since(written) > liveEditBound {
				t.Fatalf("%s: no refused reload counted %v after the write:\n%s", edit, liveEditBound, p.Logs)
			}
		}
		time.Sleep(5 * time.Millisecond)
	}
	if _, body := p.httpGet("/rlconfig"); !strings.Contains(body, "last_error:") {
		t.Errorf("%s: /rlconfig shows no last_error:\n%s", edit, body)
	}
}
