package test

import (
	"bytes"
	"encoding/json"
	"net/http"
	"regexp"
	"strings"
	"testing"
)

// TestFirstMinute: what a newcomer sees after starting floodgate without
// a store: one line naming the endpoints with the URLs to try, a /rlconfig
// that says the counters live in this process, /json answers in compact
// JSON (the same bytes from every build), and no rule reload counted.
func TestFirstMinute(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	writeRules(t, dir, map[string]string{"e2e.yaml": e2eRules})
	p := start(t, options{args: []string{"-config", dir}})

	base := "http://" + p.HTTPAddr
	serving := regexp.MustCompile(`level=INFO msg=serving grpc=` + regexp.QuoteMeta(p.GRPCAddr) + ` http=` + regexp.QuoteMeta(p.HTTPAddr) +
		` debug=\S+ healthcheck=` + regexp.QuoteMeta(base) + `/healthcheck rlconfig=` + regexp.QuoteMeta(base) + `/rlconfig json=` +
		regexp.QuoteMeta(base) + `/json metrics=` + regexp.QuoteMeta(base) + `/metrics ui=` + regexp.QuoteMeta(base) + `/ui/\n`)
	if !serving.MatchString(p.Logs.String()) {
		t.Errorf("no start-up line names the endpoints (%s):\n%s", serving, p.Logs)
	}

	_, body := p.httpGet("/rlconfig")
	for _, want := range []string{"\nhealth: SERVING\n", "\nstore: memory healthy (counters in this process only: not shared with other instances, lost on restart"} {
		if !strings.Contains(body, want) {
			t.Errorf("/rlconfig lacks %q:\n%s", want, body)
		}
	}

	code, body := p.postJSON(`{"domain":"e2e","descriptors":[{"entries":[{"key":"user","value":"first-minute"}]}]}`)
	prefix := `{"overallCode":"OK","statuses":[{"code":"OK","currentLimit":{"requestsPerUnit":3,"unit":"DAY"},"limitRemaining":2,"durationUntilReset":"`
	var compact bytes.Buffer
	if err := json.Compact(&compact, []byte(body)); err != nil || code != http.StatusOK || compact.String() != body || !strings.HasPrefix(body, prefix) {
		t.Errorf("/json: %d %q (%v), want compact JSON starting %s", code, body, err, prefix)
	}

	for _, result := range []string{"success", "failure"} {
		if v := p.metric(`floodgate_rules_reloads_total{result="` + result + `"}`); v != 0 {
			t.Errorf("floodgate_rules_reloads_total{result=%q} = %v on a fresh start, want 0", result, v)
		}
	}
}
