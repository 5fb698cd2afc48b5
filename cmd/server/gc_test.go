package main

import (
	"log/slog"
	"os"
	"os/exec"
	"path/filepath"
	"runtime/debug"
	"strconv"
	"strings"
	"testing"
)

func TestGCDefaults(t *testing.T) {
	noCgroup := t.TempDir()
	limited := cgroupTree(t, map[string]string{"proc/self/cgroup": "0::/pod\n", "sys/fs/cgroup/pod/memory.max": "1073741824\n"})
	tests := []struct {
		name string
		env  map[string]string
		root string
		want gcSettings
	}{
		{"unset: floodgate's default", nil, noCgroup, gcSettings{gogc: defaultGOGC}},
		{"empty counts as unset, as the runtime reads it", map[string]string{"GOGC": "", "GOMEMLIMIT": ""}, noCgroup, gcSettings{gogc: defaultGOGC}},
		{"a number wins", map[string]string{"GOGC": "50"}, noCgroup, gcSettings{}},
		{"off wins", map[string]string{"GOGC": "off"}, noCgroup, gcSettings{}},
		{"GOMEMLIMIT alone leaves the GOGC default", map[string]string{"GOMEMLIMIT": "64MiB"}, noCgroup, gcSettings{gogc: defaultGOGC}},
		{"a cgroup limit gives the soft limit", nil, limited, gcSettings{gogc: defaultGOGC, memLimit: 966367641}},
		{"GOMEMLIMIT wins over the cgroup", map[string]string{"GOMEMLIMIT": "64MiB"}, limited, gcSettings{gogc: defaultGOGC}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			env := func(k string) (string, bool) { v, ok := tt.env[k]; return v, ok }
			if got := gcDefaults(env, tt.root); got != tt.want {
				t.Errorf("gcDefaults = %+v; want %+v", got, tt.want)
			}
		})
	}
}

// cgroupTree writes files (path under the root -> content) into a new
// directory and returns it, the root of a file system as cgroupMemoryLimit
// reads it.
func cgroupTree(t *testing.T, files map[string]string) string {
	t.Helper()
	root := t.TempDir()
	for name, content := range files {
		p := filepath.Join(root, name)
		if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(p, []byte(content), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	return root
}

func TestCgroupMemoryLimit(t *testing.T) {
	tests := []struct {
		name  string
		files map[string]string
		want  int64
	}{
		{"no cgroup file", nil, 0},
		{"v2, limited", map[string]string{"proc/self/cgroup": "0::/kubepods/pod1/c1\n", "sys/fs/cgroup/kubepods/pod1/c1/memory.max": "536870912\n"}, 512 << 20},
		{"v2, max", map[string]string{"proc/self/cgroup": "0::/c1\n", "sys/fs/cgroup/c1/memory.max": "max\n"}, 0},
		{"v2, a parent's limit is smaller", map[string]string{
			"proc/self/cgroup":                     "0::/pod/c1\n",
			"sys/fs/cgroup/pod/c1/memory.max":      "max\n",
			"sys/fs/cgroup/pod/memory.max":         "268435456\n",
			"sys/fs/cgroup/memory.max":             "1073741824\n",
			"sys/fs/cgroup/pod/c1/memory.high":     "1\n",
			"sys/fs/cgroup/pod/c1/memory.min":      "1\n",
			"sys/fs/cgroup/pod/c1/memory.current":  "1\n",
			"sys/fs/cgroup/pod/c1/memory.swap.max": "1\n",
		}, 256 << 20},
		{"v2, namespaced: the process's cgroup is the mount", map[string]string{"proc/self/cgroup": "0::/\n", "sys/fs/cgroup/memory.max": "134217728\n"}, 128 << 20},
		{"v2, a path the namespace hides", map[string]string{"proc/self/cgroup": "0::/../other\n", "sys/fs/cgroup/memory.max": "134217728\n"}, 128 << 20},
		{"v1, limited", map[string]string{"proc/self/cgroup": "5:cpu,cpuacct:/x\n4:memory:/docker/abc\n", "sys/fs/cgroup/memory/docker/abc/memory.limit_in_bytes": "314572800\n"}, 300 << 20},
		{"v1, unlimited", map[string]string{"proc/self/cgroup": "4:memory:/\n", "sys/fs/cgroup/memory/memory.limit_in_bytes": "9223372036854771712\n"}, 0},
		{"v1, the process's cgroup not visible", map[string]string{"proc/self/cgroup": "4:memory:/process_api/df1e\n", "sys/fs/cgroup/memory/memory.limit_in_bytes": "9223372036854771712\n"}, 0},
		{"hybrid: the smaller of v1 and v2", map[string]string{
			"proc/self/cgroup": "4:memory:/a\n0::/b\n",
			"sys/fs/cgroup/memory/a/memory.limit_in_bytes": "209715200\n",
			"sys/fs/cgroup/b/memory.max":                   "104857600\n",
		}, 100 << 20},
		{"garbage", map[string]string{"proc/self/cgroup": "0::/c\n", "sys/fs/cgroup/c/memory.max": "lots\n"}, 0},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if got := cgroupMemoryLimit(cgroupTree(t, tt.files)); got != tt.want {
				t.Errorf("cgroupMemoryLimit = %d; want %d", got, tt.want)
			}
		})
	}
}

// gcChildVar makes the test binary, started again by
// TestGCDefaultInProcess, apply the default and print what is in force;
// gcRootVar is the root of the cgroup files it reads.
const (
	gcChildVar = "FLOODGATE_TEST_GC_CHILD"
	gcRootVar  = "FLOODGATE_TEST_GC_ROOT"
)

// TestGCDefaultInProcess starts this test binary again with various
// environments, so that the Go runtime reads GOGC and GOMEMLIMIT as it does
// at floodgate's start, and checks the settings in force after
// applyGCDefault: the environment's GOGC wins over the default, and
// GOMEMLIMIT over the cgroup's limit.
func TestGCDefaultInProcess(t *testing.T) {
	if os.Getenv(gcChildVar) == "1" {
		applyGCDefault(os.LookupEnv, os.Getenv(gcRootVar))
		gogc, limit := gcInEffect()
		os.Stdout.WriteString("gogc=" + strconv.FormatInt(gogc, 10) + " limit=" + strconv.FormatInt(limit, 10) + "\n")
		return
	}
	none := t.TempDir()
	limited := cgroupTree(t, map[string]string{"proc/self/cgroup": "0::/\n", "sys/fs/cgroup/memory.max": "1073741824\n"})
	tests := []struct {
		env  []string
		root string
		want string
	}{
		{nil, none, "gogc=" + strconv.Itoa(defaultGOGC) + " limit=-1"},
		{[]string{"GOGC=50"}, none, "gogc=50 limit=-1"},
		{[]string{"GOGC=off"}, none, "gogc=-1 limit=-1"},
		{[]string{"GOMEMLIMIT=64MiB"}, none, "gogc=" + strconv.Itoa(defaultGOGC) + " limit=67108864"},
		{[]string{"GOGC=100", "GOMEMLIMIT=1GiB"}, none, "gogc=100 limit=1073741824"},
		{nil, limited, "gogc=" + strconv.Itoa(defaultGOGC) + " limit=966367641"},
		{[]string{"GOMEMLIMIT=64MiB"}, limited, "gogc=" + strconv.Itoa(defaultGOGC) + " limit=67108864"},
	}
	for _, tt := range tests {
		name := strings.Join(tt.env, ",")
		if name == "" {
			name = "no variable"
		}
		if tt.root == limited {
			name += ",cgroup 1GiB"
		}
		t.Run(name, func(t *testing.T) {
			out := gcChild(t, "^TestGCDefaultInProcess$", tt.root, tt.env...)
			if !strings.Contains(out, tt.want+"\n") {
				t.Errorf("child printed %q; want a line %q", out, tt.want)
			}
		})
	}
}

// gcChild runs this test binary's test run as a child with env and the
// cgroup files under root, and returns its output.
func gcChild(t *testing.T, run, root string, env ...string) string {
	t.Helper()
	cmd := gcChildCmd(root, run, env...)
	cmd.Env = append(cmd.Env, gcChildVar+"=1")
	out, err := cmd.CombinedOutput()
	if err != nil {
		t.Fatalf("child: %v\n%s", err, out)
	}
	return string(out)
}

// gcChildCmd is the command running test run of this binary with env, the
// cgroup files under root and none of the test's own GC variables.
func gcChildCmd(root, run string, env ...string) *exec.Cmd {
	cmd := exec.Command(os.Args[0], "-test.run="+run)
	cmd.Env = append(withoutGCVars(os.Environ()), gcRootVar+"="+root)
	cmd.Env = append(cmd.Env, env...)
	return cmd
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

// TestLogGC checks the start line's account of the collector's settings:
// the target and whether floodgate's default set it, and the memory limit
// and whether GOMEMLIMIT or the cgroup gave it.
func TestLogGC(t *testing.T) {
	tests := []struct {
		name     string
		env      map[string]string
		memLimit int64 // set in the process for the test; -1: none
		want     []string
		not      []string
	}{
		{"defaults", nil, -1, []string{"gogc_from=default", "gomemlimit_bytes=none"}, []string{"gomemlimit_from"}},
		{"GOGC", map[string]string{"GOGC": "50"}, -1, []string{"gogc_from=GOGC", "gomemlimit_bytes=none"}, []string{"default"}},
		{"cgroup", nil, 241591910, []string{"gomemlimit_bytes=241591910 gomemlimit_from=cgroup"}, nil},
		{"GOMEMLIMIT", map[string]string{"GOMEMLIMIT": "64MiB"}, 64 << 20, []string{"gomemlimit_bytes=67108864 gomemlimit_from=GOMEMLIMIT"}, nil},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if tt.memLimit >= 0 {
				defer debug.SetMemoryLimit(debug.SetMemoryLimit(tt.memLimit))
			}
			var b strings.Builder
			env := func(k string) (string, bool) { v, ok := tt.env[k]; return v, ok }
			logGC(slog.New(slog.NewTextHandler(&b, nil)), env)
			for _, w := range tt.want {
				if !strings.Contains(b.String(), w) {
					t.Errorf("logged %q; want %q in it", b.String(), w)
				}
			}
			for _, n := range tt.not {
				if strings.Contains(b.String(), n) {
					t.Errorf("logged %q; want no %q", b.String(), n)
				}
			}
		})
	}
}
