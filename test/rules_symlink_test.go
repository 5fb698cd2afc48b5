package test

import (
	"fmt"
	"os"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"testing"
	"time"
)

// symlinkReloadBound is the longest a change behind a link may take to be
// in force (or refused) in /rlconfig.
const symlinkReloadBound = 2 * time.Second

// perDay is a rule file for domain "rules" allowing n per day to key user.
func perDay(n int) string {
	return "domain: rules\ndescriptors:\n  - key: user\n    rate_limit: {unit: day, requests_per_unit: " + strconv.Itoa(n) + "}\n"
}

// rlField reads a "name: value" line of /rlconfig.
func rlField(body, name string) string {
	m := regexp.MustCompile(`(?m)^` + name + `: (.*)$`).FindStringSubmatch(body)
	if m == nil {
		return ""
	}
	return m[1]
}

// TestRuntimeRootSwap runs the binary on the reference server's layout,
// RUNTIME_ROOT a "current" link swapped from release to release with the
// rules in RUNTIME_SUBDIRECTORY/config, under each RUNTIME_WATCH_ROOT
// value: swaps and edits of the release in force are loaded, edits of an
// old release are not, and a broken or removed release is refused and
// shown in /rlconfig while the last good rules serve.
func TestRuntimeRootSwap(t *testing.T) {
	for _, watchRoot := range []string{"true", "false", ""} {
		t.Run("RUNTIME_WATCH_ROOT="+watchRoot, func(t *testing.T) {
			t.Parallel()
			base := t.TempDir()
			runtime := filepath.Join(base, "srv", "runtime_data")
			rules := func(release string) string { return filepath.Join(runtime, release, "ratelimit", "config") }
			swap := func(release string) {
				link := filepath.Join(runtime, "current")
				if err := os.Symlink(release, link+".new"); err != nil {
					t.Fatal(err)
				}
				if err := os.Rename(link+".new", link); err != nil {
					t.Fatal(err)
				}
			}
			writeRules(t, rules("rel1"), map[string]string{"rules.yaml": perDay(3)})
			if err := os.Symlink("rel1", filepath.Join(runtime, "current")); err != nil {
				t.Fatal(err)
			}
			env := []string{"RUNTIME_ROOT=" + filepath.Join(runtime, "current"), "RUNTIME_SUBDIRECTORY=ratelimit"}
			if watchRoot != "" {
				env = append(env, "RUNTIME_WATCH_ROOT="+watchRoot)
			}
			p := start(t, options{env: env, envAddrs: true})

			// limit checks the limit in force with a fresh user.
			user := 0
			limit := func(n int) string {
				user++
				want := "OK OK:" + strconv.Itoa(n-1)
				if got := summary(p.mustCall(request("rules", desc("user", "u"+strconv.Itoa(user))))); got != want {
					return fmt.Sprintf("answer %q, want %q (%d per day)", got, want, n)
				}
				return ""
			}
			status := func() (version, failures, reloads, lastError string) {
				_, body := p.httpGet("/rlconfig")
				return rlField(body, "version"), rlField(body, "failures"), rlField(body, "reloads"), rlField(body, "last_error")
			}
			if msg := limit(3); msg != "" {
				t.Fatalf("first load: %s", msg)
			}
			steps := []struct {
				name string
				do   func()
				// version and n (per day) in force after the step; refused
				// when the step must be counted as a failure with
				// last_error set; ignored when it must cause no reload.
				version, n       int
				refused, ignored bool
			}{
				{"swap current to rel2", func() {
					writeRules(t, rules("rel2"), map[string]string{"rules.yaml": perDay(10)})
					swap("rel2")
				}, 2, 10, false, false},
				{"edit rel2", func() { writeRules(t, rules("rel2"), map[string]string{"rules.yaml": perDay(20)}) }, 3, 20, false, false},
				{"edit the old rel1", func() { writeRules(t, rules("rel1"), map[string]string{"rules.yaml": perDay(99)}) }, 3, 20, false, true},
				{"break rel2", func() { writeRules(t, rules("rel2"), map[string]string{"rules.yaml": garbledRules}) }, 3, 20, true, false},
				{"rm -rf rel2", func() {
					if err := os.RemoveAll(filepath.Join(runtime, "rel2")); err != nil {
						t.Fatal(err)
					}
				}, 3, 20, true, false},
				{"swap current to rel3", func() {
					writeRules(t, rules("rel3"), map[string]string{"rules.yaml": perDay(30)})
					swap("rel3")
				}, 4, 30, false, false},
				{"edit rel3", func() { writeRules(t, rules("rel3"), map[string]string{"rules.yaml": perDay(40)}) }, 5, 40, false, false},
			}
			for _, st := range steps {
				_, failed, reloads, _ := status()
				start := time.Now()
				st.do()
				if st.ignored {
					for time.Since(start) < time.Second {
						if v, _, r, _ := status(); r != reloads || v != strconv.Itoa(st.version) {
							t.Fatalf("%s: reloads %s (was %s), version %s: want no reload", st.name, r, reloads, v)
						}
						time.Sleep(25 * time.Millisecond)
					}
				} else {
					eventually(t, symlinkReloadBound, func() string {
						v, f, _, e := status()
						switch {
						case v != strconv.Itoa(st.version):
							return fmt.Sprintf("%s: version %s, want %d", st.name, v, st.version)
						case st.refused && (f == failed || e == "none"):
							return fmt.Sprintf("%s: failures %s (was %s), last_error %q: want the refusal shown", st.name, f, failed, e)
						case !st.refused && e != "none":
							return fmt.Sprintf("%s: last_error %q, want none", st.name, e)
						}
						return ""
					})
					t.Logf("%s: in /rlconfig after %v", st.name, time.Since(start).Round(time.Millisecond))
				}
				if msg := limit(st.n); msg != "" {
					t.Errorf("after %s: %s", st.name, msg)
				}
			}
			// The limit in force is named by the path as configured, through
			// the link, not by the release it came from.
			want := "rules.user: 40 per day (fixed_window) (" + filepath.Join(runtime, "current", "ratelimit", "config", "rules.yaml") + ":"
			if _, body := p.httpGet("/rlconfig"); !strings.Contains(body, want) {
				t.Errorf("/rlconfig does not hold %q:\n%s", want, body)
			}
			checkNoCrash(t, p)
		})
	}
}
