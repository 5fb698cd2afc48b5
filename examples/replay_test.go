package examples_test

import (
	"encoding/json"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"gopkg.in/yaml.v3"

	"github.com/floodgate/floodgate/internal/harness"
	"github.com/floodgate/floodgate/internal/harness/envoytest"
)

const accessLogFile = "envoy-access-log.yaml"

// withAccessLog returns examples/envoy.yaml with the access_log of
// examples/envoy-access-log.yaml added to its HTTP listener, writing to
// path instead of stdout: the one change a user makes.
func withAccessLog(t *testing.T, path string) []byte {
	t.Helper()
	_, doc := readEnvoyConfig(t, envoyHTTPFile)
	_, frag := readEnvoyConfig(t, accessLogFile)
	logs := list(frag, "access_log")
	if len(logs) != 1 {
		t.Fatalf("%s: want one access_log, got %d", accessLogFile, len(logs))
	}
	typed, _ := dig(logs[0], "typed_config").(map[string]any)
	if typed == nil || typed["path"] != "/dev/stdout" {
		t.Fatalf("%s: the logger's path is not /dev/stdout: %v", accessLogFile, typed)
	}
	typed["path"] = path
	hcm, _ := dig(list(doc, "static_resources", "listeners")[0], "filter_chains", 0, "filters", 0, "typed_config").(map[string]any)
	if hcm == nil {
		t.Fatalf("%s: no http_connection_manager on the first listener", envoyHTTPFile)
	}
	hcm["access_log"] = logs
	out, err := yaml.Marshal(doc)
	if err != nil {
		t.Fatal(err)
	}
	return out
}

// TestReplayEnvoyAccessLog runs the real Envoy with the shipped access log
// in front of floodgate (with -response-dynamic-metadata), sends traffic,
// and replays the log Envoy wrote with `floodgate replay`: the replay of
// the rules in force finds the answers clients got, request by request,
// and the replay of an edit finds what it changes.
func TestReplayEnvoyAccessLog(t *testing.T) {
	dir := t.TempDir()
	logPath := filepath.Join(dir, "access.log")
	p := startFloodgate(t, "-response-dynamic-metadata")
	backend := startBackend(t)
	e := envoytest.Start(t, envoytest.Config{
		Bootstrap: withAccessLog(t, logPath),
		Upstreams: map[string][]string{"floodgate": {p.GRPCAddr}, "backend": {backend}},
	})
	addr := e.Listener("http")

	// Exports are a leaky bucket per key and path of burst 2 draining 3
	// per 5 minutes: whatever the timing, bob's first two pass and the
	// next four are refused. /health calls no one, and the last request
	// is another client's.
	reqs := []envoyRequest{}
	for range 6 {
		reqs = append(reqs, envoyRequest{method: "GET", path: "/export/report.csv", headers: []string{"x-forwarded-for: 203.0.113.20", "x-api-key: bob"}})
	}
	reqs = append(reqs,
		envoyRequest{method: "GET", path: "/health", headers: []string{"x-forwarded-for: 10.0.0.10"}},
		envoyRequest{method: "GET", path: "/", headers: []string{"x-forwarded-for: 203.0.113.21"}})
	var live []int
	for _, r := range reqs {
		resp, _ := r.send(t, addr)
		live = append(live, resp.StatusCode)
	}
	want := []int{200, 200, 429, 429, 429, 429, 200, 200}
	if !slices.Equal(live, want) {
		t.Fatalf("through Envoy: %v, want %v", live, want)
	}
	// Envoy writes its access log out every 10 s by default, and when it
	// stops.
	e.Stop()
	var lines []string
	for deadline := time.Now().Add(15 * time.Second); ; time.Sleep(50 * time.Millisecond) {
		b, _ := os.ReadFile(logPath)
		lines = strings.Split(strings.TrimSpace(string(b)), "\n")
		if len(lines) == len(reqs) || time.Now().After(deadline) {
			break
		}
	}
	if len(lines) != len(reqs) {
		t.Fatalf("access log has %d lines, want %d:\n%s", len(lines), len(reqs), strings.Join(lines, "\n"))
	}
	for i, l := range lines {
		var rec struct {
			Status    int
			Ratelimit json.RawMessage
		}
		if err := json.Unmarshal([]byte(l), &rec); err != nil || rec.Status != live[i] {
			t.Errorf("access log line %d %s: %v; want status %d", i+1, l, err, live[i])
		}
		if noCall := reqs[i].path == "/health"; noCall != (string(rec.Ratelimit) == "null") {
			t.Errorf("access log line %d: ratelimit %s", i+1, rec.Ratelimit)
		}
	}

	// The edit: a burst of 4 for exports.
	copyDir(t, filepath.Join(repoRoot, "config"), filepath.Join(dir, "old"))
	copyDir(t, filepath.Join(repoRoot, "config"), filepath.Join(dir, "new"))
	demo := filepath.Join(dir, "new", "demo.yaml")
	text, err := os.ReadFile(demo)
	if err != nil {
		t.Fatal(err)
	}
	edited := strings.Replace(string(text), "algorithm: leaky_bucket\n          burst: 2", "algorithm: leaky_bucket\n          burst: 4", 1)
	if edited == string(text) {
		t.Fatal("config/demo.yaml has no export leaky bucket of burst 2 to edit")
	}
	if err := os.WriteFile(demo, []byte(edited), 0o644); err != nil {
		t.Fatal(err)
	}
	out, code := runFloodgate(t, dir, "replay", "-old", "old", "-new", "new", "-traffic", logPath, "-format", "json")
	if code != 0 {
		t.Fatalf("floodgate replay: exit %d:\n%s", code, out)
	}
	var rep struct {
		Requests, Skipped int
		Old, New          struct{ Allowed, Denied int }
		Rules             []struct {
			Rule     string
			Old, New struct{ Allowed, Denied int }
		}
		Changed struct {
			Total      int
			NowAllowed int `json:"now_allowed"`
		}
	}
	// The report is stdout; the log line after it is stderr.
	if err := json.NewDecoder(strings.NewReader(out)).Decode(&rep); err != nil {
		t.Fatalf("%v:\n%s", err, out)
	}
	// The replay of the rules in force answers as floodgate did: 3 of 7
	// allowed (the 2 exports and the other client), 4 denied.
	if rep.Requests != 7 || rep.Skipped != 1 || rep.Old.Allowed != 3 || rep.Old.Denied != 4 {
		t.Errorf("old: %+v; want 7 requests (1 skipped), 3 allowed, 4 denied as live", rep)
	}
	// With a burst of 4, two more exports pass.
	if rep.New.Allowed != 5 || rep.New.Denied != 2 || rep.Changed.Total != 2 || rep.Changed.NowAllowed != 2 {
		t.Errorf("new: %+v; want 5 allowed, 2 denied, 2 now allowed", rep)
	}
	found := false
	for _, r := range rep.Rules {
		if r.Rule == "demo.api_key.path_/export/*" {
			found = r.Old.Allowed == 2 && r.Old.Denied == 4 && r.New.Allowed == 4 && r.New.Denied == 2
		}
	}
	if !found {
		t.Errorf("the export rule is not 2/4 old and 4/2 new: %+v", rep.Rules)
	}
}

// TestReadmeReplayExample runs the README's replay example (a text block,
// which TestReadmeCommands does not run, since it reads files of the
// repository rather than the demo's) from the repository's root and
// compares the report with the one shown.
func TestReadmeReplayExample(t *testing.T) {
	var cmds, want []string
	for _, b := range readMarkdown(t, filepath.Join(repoRoot, "README.md")).blocks {
		if b.lang != "text" {
			continue
		}
		cmds, want = nil, nil
		for _, l := range b.lines {
			if c, ok := strings.CutPrefix(l, "$ "); ok {
				cmds = append(cmds, c)
			} else {
				want = append(want, l)
			}
		}
		if len(cmds) == 2 && strings.Contains(cmds[1], goRunReplay+" ") {
			break
		}
		cmds = nil
	}
	if len(cmds) != 2 {
		t.Fatal("README.md has no text block with the edit and a `" + goRunReplay + "` command")
	}
	bash := harness.Require(t, "bash")
	const shown = "/tmp/edited"
	edited := filepath.Join(t.TempDir(), "edited")
	root, err := filepath.Abs(repoRoot)
	if err != nil {
		t.Fatal(err)
	}
	run := func(cmd string) string {
		t.Helper()
		cmd = strings.ReplaceAll(cmd, shown, edited)
		cmd = strings.Replace(cmd, goRunReplay, filepath.Join(filepath.Dir(floodgateBinary(t)), harness.ReplayProgram), 1)
		c := exec.Command(bash, "-c", cmd)
		c.Dir = root
		var stderr strings.Builder
		c.Stderr = &stderr
		out, err := c.Output()
		if err != nil {
			t.Fatalf("%s: %v\n%s", cmd, err, stderr.String())
		}
		return strings.ReplaceAll(string(out), edited, shown)
	}
	run(cmds[0])
	got := strings.Split(strings.TrimSuffix(run(cmds[1]), "\n"), "\n")
	if !slices.Equal(got, want) {
		t.Errorf("README.md's replay example prints\n%s\nnot\n%s", strings.Join(got, "\n"), strings.Join(want, "\n"))
	}
}
