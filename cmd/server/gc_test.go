package main

import (
	"os"
	"os/exec"
	"strconv"
	"strings"
	"testing"
)

func TestGCDefault(t *testing.T) {
	tests := []struct {
		name      string
		env       map[string]string
		wantGOGC  int
		wantApply bool
	}{
		{"unset: floodgate's default", nil, defaultGOGC, true},
		{"empty counts as unset, as the runtime reads it", map[string]string{"GOGC": ""}, defaultGOGC, true},
		{"a number wins", map[string]string{"GOGC": "50"}, 0, false},
		{"off wins", map[string]string{"GOGC": "off"}, 0, false},
		{"GOMEMLIMIT alone leaves the GOGC default", map[string]string{"GOMEMLIMIT": "64MiB"}, defaultGOGC, true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			env := func(k string) (string, bool) { v, ok := tt.env[k]; return v, ok }
			gogc, apply := gcDefault(env)
			if gogc != tt.wantGOGC || apply != tt.wantApply {
				t.Errorf("gcDefault = %d, %v; want %d, %v", gogc, apply, tt.wantGOGC, tt.wantApply)
			}
		})
	}
}

// gcChildVar makes the test binary, started again by
// TestGCDefaultInProcess, apply the default and print what is in force.
const gcChildVar = "FLOODGATE_TEST_GC_CHILD"

// TestGCDefaultInProcess starts this test binary again with various
// environments, so that the Go runtime reads GOGC and GOMEMLIMIT as it does
// at floodgate's start, and checks the settings in force after
// applyGCDefault: the environment's GOGC wins over the default, and the
// default touches no memory limit.
func TestGCDefaultInProcess(t *testing.T) {
	if os.Getenv(gcChildVar) == "1" {
		applyGCDefault(os.LookupEnv)
		gogc, limit := gcInEffect()
		os.Stdout.WriteString("gogc=" + strconv.FormatInt(gogc, 10) + " limit=" + strconv.FormatInt(limit, 10) + "\n")
		return
	}
	tests := []struct {
		env  []string
		want string
	}{
		{nil, "gogc=" + strconv.Itoa(defaultGOGC) + " limit=-1"},
		{[]string{"GOGC=50"}, "gogc=50 limit=-1"},
		{[]string{"GOGC=off"}, "gogc=-1 limit=-1"},
		{[]string{"GOMEMLIMIT=64MiB"}, "gogc=" + strconv.Itoa(defaultGOGC) + " limit=67108864"},
		{[]string{"GOGC=100", "GOMEMLIMIT=1GiB"}, "gogc=100 limit=1073741824"},
	}
	for _, tt := range tests {
		t.Run(strings.Join(tt.env, ","), func(t *testing.T) {
			cmd := exec.Command(os.Args[0], "-test.run=^TestGCDefaultInProcess$")
			cmd.Env = append(withoutGCVars(os.Environ()), gcChildVar+"=1")
			cmd.Env = append(cmd.Env, tt.env...)
			out, err := cmd.CombinedOutput()
			if err != nil {
				t.Fatalf("child: %v\n%s", err, out)
			}
			if !strings.Contains(string(out), tt.want+"\n") {
				t.Errorf("child printed %q; want a line %q", out, tt.want)
			}
		})
	}
}

// withoutGCVars drops GOGC and GOMEMLIMIT from env, so that the test's own
// environment does not decide the children's.
func withoutGCVars(env []string) []string {
	var out []string
	for _, kv := range env {
		if !strings.HasPrefix(kv, "GOGC=") && !strings.HasPrefix(kv, "GOMEMLIMIT=") {
			out = append(out, kv)
		}
	}
	return out
}
