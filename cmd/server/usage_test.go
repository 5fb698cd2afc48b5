package main

import (
	"context"
	"encoding/json"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"testing"

	"github.com/floodgate/floodgate/internal/settings"
	"github.com/floodgate/floodgate/internal/testlog"
)

// runOnce runs the program to its end with args and env, and returns its
// exit code, stdout and stderr.
func runOnce(t *testing.T, args []string, env settings.Lookup) (int, string, string) {
	t.Helper()
	var stdout, stderr testlog.Buffer
	code := run(context.Background(), args, env, &stdout, &stderr)
	return code, stdout.String(), stderr.String()
}

// envOf is an environment of the pairs kv.
func envOf(kv ...string) settings.Lookup {
	m := map[string]string{}
	for i := 0; i+1 < len(kv); i += 2 {
		m[kv[i]] = kv[i+1]
	}
	return func(k string) (string, bool) { v, ok := m[k]; return v, ok }
}

// -h and -help print to stdout, exit 0, and show each flag once, sorted
// within its section, with its default and the variables that set it.
func TestUsage(t *testing.T) {
	for _, args := range [][]string{{"-h"}, {"-help"}, {"help"}} {
		code, out, errOut := runOnce(t, args, envOf())
		if code != 0 || errOut != "" {
			t.Fatalf("%v: exit %d, stderr %q", args, code, errOut)
		}
		if !strings.HasPrefix(out, "Usage: floodgate") {
			t.Fatalf("%v: stdout does not start with the usage:\n%s", args, out)
		}
	}
	_, out, _ := runOnce(t, []string{"-h"}, envOf())
	// Each flag: its line, its usage with the default, its variables.
	for _, sec := range strings.Split(out, "\n\n")[1:] {
		var names []string
		for _, m := range regexp.MustCompile(`(?m)^  -([a-z-]+)`).FindAllStringSubmatch(sec, -1) {
			names = append(names, m[1])
		}
		if !slices.IsSorted(names) {
			t.Errorf("section not sorted: %v", names)
		}
	}
	for _, s := range settings.Table {
		dflt := `.*\(default [^\n]*\)`
		if s.At == nil {
			dflt = `retired: .*` // lands nowhere: no default
		}
		re := regexp.MustCompile(`(?m)^  -` + regexp.QuoteMeta(s.Flag) + `( [a-z]+)?\n    \t` + dflt + `\n(    \tenv: ([^\n]*)\n)?`)
		all := re.FindAllStringSubmatch(out, -1)
		if len(all) != 1 {
			t.Errorf("-%s: %d entries with a default (or retired) in -h, want 1", s.Flag, len(all))
			continue
		}
		env := all[0][3]
		for _, v := range s.Vars() {
			if !strings.Contains(env, v) {
				t.Errorf("-%s: its entry does not name %s (env: %q)", s.Flag, v, env)
			}
		}
	}
	for _, want := range []string{"env: FLOODGATE_REDIS, REDIS_URL", "env: FLOODGATE_HTTP_ADDR, HOST, PORT",
		"env: FLOODGATE_CONFIG, RUNTIME_ROOT, RUNTIME_SUBDIRECTORY, RUNTIME_APPDIRECTORY, FLOODGATE_DEFAULT_CONFIG"} {
		if !strings.Contains(out, want) {
			t.Errorf("-h lacks %q", want)
		}
	}
}

// A bad command line or environment gets one line naming what is wrong and
// what is accepted, with a hint, in the log format asked for (text when
// the format itself cannot be read), and exit code 2.
func TestCommandLineErrors(t *testing.T) {
	tests := []struct {
		name string
		args []string
		env  settings.Lookup
		json bool
		want []string
	}{
		{"an unknown flag", []string{"-nope"}, envOf(), false, []string{"flag provided but not defined: -nope"}},
		{"a bad integer", []string{"-redis-pool-size", "ten"}, envOf(), false, []string{`invalid value "ten" for flag -redis-pool-size: want an integer`}},
		{"a bad duration", []string{"-redis-deadline=soon"}, envOf(), false, []string{"want a duration such as 500ms"}},
		{"a bad boolean", []string{"-shadow-mode=maybe"}, envOf(), false, []string{"want true or false"}},
		{"a bad variable", nil, envOf("REDIS_URL", "h:1", "REDIS_POOL_SIZE", "ten"), false, []string{`REDIS_POOL_SIZE="ten" (for -redis-pool-size): want an integer`}},
		{"a bad duration variable", nil, envOf("FLOODGATE_DRAIN_DELAY", "5"), false, []string{`FLOODGATE_DRAIN_DELAY="5" (for -drain-delay): want a duration`}},
		{"a bad log level", nil, envOf("LOG_LEVEL", "loud"), false, []string{"want debug, info, warn or error"}},
		{"a bad socket type", nil, envOf("REDIS_URL", "h:1", "REDIS_SOCKET_TYPE", "udp"), false, []string{"REDIS_SOCKET_TYPE=udp: want tcp or unix"}},
		{"JSON from the flag", []string{"-log-format", "json", "-nope"}, envOf(), true, []string{"flag provided but not defined: -nope"}},
		{"JSON from LOG_FORMAT, in any case", []string{"-max-entries", "x"}, envOf("LOG_FORMAT", "JSON"), true, []string{"want an integer"}},
		{"JSON from FLOODGATE_LOG_FORMAT", nil, envOf("FLOODGATE_LOG_FORMAT", "json", "SHADOW_MODE", "perhaps"), true, []string{`SHADOW_MODE="perhaps"`}},
		{"an unreadable format falls back to text", nil, envOf("LOG_FORMAT", "xml"), false, []string{`LOG_FORMAT="xml" (for -log-format): want text or json`}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			code, out, errOut := runOnce(t, tc.args, tc.env)
			if code != 2 || out != "" {
				t.Errorf("exit %d, stdout %q: want 2 and nothing", code, out)
			}
			lines := strings.Split(strings.TrimSuffix(errOut, "\n"), "\n")
			if len(lines) != 1 {
				t.Fatalf("%d lines on stderr, want 1:\n%s", len(lines), errOut)
			}
			line := lines[0]
			if tc.json {
				var rec struct{ Level, Msg, Err, Hint string }
				if err := json.Unmarshal([]byte(line), &rec); err != nil {
					t.Fatalf("not a JSON line: %v\n%s", err, line)
				}
				if rec.Level != "ERROR" || rec.Hint != flagHint {
					t.Errorf("level %q hint %q", rec.Level, rec.Hint)
				}
				line = rec.Err
			} else if !strings.HasPrefix(line, "floodgate: ") || !strings.HasSuffix(line, "("+flagHint+")") {
				t.Errorf("want floodgate: ... (%s), got %q", flagHint, line)
			}
			for _, w := range tc.want {
				if !strings.Contains(line, w) {
					t.Errorf("the error %q does not say %q", line, w)
				}
			}
		})
	}
}

// -version and the version command print the build, and exit 0.
func TestVersion(t *testing.T) {
	for _, args := range [][]string{{"-version"}, {"version"}} {
		code, out, errOut := runOnce(t, args, envOf())
		if code != 0 || errOut != "" || !regexp.MustCompile(`^floodgate \S+ commit \S+ go\S*\n$`).MatchString(out) {
			t.Errorf("%v: exit %d, stdout %q, stderr %q", args, code, out, errOut)
		}
	}

}

// The commands do what their flags do; serve is the default.
func TestCommands(t *testing.T) {
	tests := []struct {
		in, want []string
	}{
		{[]string{"check", "-config", "x"}, []string{"-check", "-config", "x"}},
		{[]string{"explain", "rl", "k=v"}, []string{"-explain", "rl", "k=v"}},
		{[]string{"serve", "-redis", "h:1"}, []string{"-redis", "h:1"}},
		{[]string{"version"}, []string{"-version"}},
		{[]string{"-check"}, []string{"-check"}},
		{nil, nil},
	}
	for _, tc := range tests {
		if got := commandArgs(tc.in); !slices.Equal(got, tc.want) {
			t.Errorf("commandArgs(%q) = %q, want %q", tc.in, got, tc.want)
		}
	}
	code, out, errOut := runOnce(t, []string{"check", "-config", "../../config"}, envOf())
	if code != 0 || !strings.Contains(out, "domain demo") {
		t.Errorf("check: exit %d\n%s%s", code, out, errOut)
	}
	code, out, errOut = runOnce(t, []string{"explain", "-config", "../../config", "demo", "api_key=alice"}, envOf())
	if code != 0 || out == "" {
		t.Errorf("explain: exit %d\n%s%s", code, out, errOut)
	}
}

// check takes the rules as its argument as well as with -config, and says
// which path it looked at when nothing is there.
func TestCheckPath(t *testing.T) {
	missing := filepath.Join(t.TempDir(), "rules.yaml")
	tests := []struct {
		name string
		args []string
		code int
		want string // in stdout for exit 0, else in stderr
	}{
		{"a file as the argument", []string{"check", "../../config/demo.yaml"}, 0, "../../config/demo.yaml: OK: 1 file, 1 domain"},
		{"a directory as the argument", []string{"check", "../../config"}, 0, "../../config: OK: 1 file"},
		{"the argument after flags", []string{"check", "-log-format", "json", "../../config"}, 0, "../../config: OK"},
		{"the flag with an argument", []string{"-check", "../../config"}, 0, "../../config: OK"},
		{"with -config", []string{"check", "-config", "../../config"}, 0, "../../config: OK"},
		{"a missing argument", []string{"check", missing}, 1, "floodgate: no rule file or directory at " + missing + "\n"},
		{"a missing -config", []string{"check", "-config", missing}, 1, "no rule file or directory at " + missing},
		{"the default, missing here", []string{"check"}, 1, "-config's default is the directory config where the command runs; name the rule file or directory: floodgate check FILE_OR_DIR"},
		{"both", []string{"check", "-config", "../../config", "../../config"}, 2, "check reads one rule file or directory, named after the flags (floodgate check [flags] FILE_OR_DIR) or with -config"},
		{"two paths", []string{"check", "../../config", "x"}, 2, `unexpected arguments ["../../config" "x"]`},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			code, out, errOut := runOnce(t, tc.args, envOf())
			got := errOut
			if tc.code == 0 {
				got = out
			}
			if code != tc.code || !strings.Contains(got, tc.want) {
				t.Errorf("exit %d, want %d with %q\nstdout: %s\nstderr: %s", code, tc.code, tc.want, out, errOut)
			}
		})
	}
}
