package replay

import (
	"errors"
	"io"
	"strings"
	"testing"
	"time"
)

func TestReaderShapes(t *testing.T) {
	tests := []struct {
		name, line string
		want       string // describe() of the request, or "skip"
		at         string
		hits       uint32
	}{
		{"floodgate's format", `{"time":"2026-01-01T00:00:01.5Z","domain":"d","descriptors":[{"entries":[{"key":"a","value":"1"},{"key":"b","value":"x=y"}]}]}`,
			"(a=1, b=x=y)", "2026-01-01T00:00:01.5Z", 0},
		{"hits_addend in both spellings", `{"time":"2026-01-01T00:00:00Z","domain":"d","hitsAddend":3,"descriptors":[{"entries":[{"key":"a","value":"1"}],"hits_addend":2}]}`,
			"(a=1)", "2026-01-01T00:00:00Z", 3},
		{"Envoy access log", `{"start_time":"2026-01-01T00:00:02.250Z","status":429,"ratelimit":{"domain":"demo","descriptors":[{"entries":["remote_address=10.0.0.1"]},{"entries":["api_key=k","path=/a=b"]}]}}`,
			"(remote_address=10.0.0.1) (api_key=k, path=/a=b)", "2026-01-01T00:00:02.25Z", 0},
		{"access log without metadata (null)", `{"start_time":"2026-01-01T00:00:00Z","ratelimit":null}`, "skip", "", 0},
		{"access log without metadata (-)", `{"start_time":"2026-01-01T00:00:00Z","ratelimit":"-"}`, "skip", "", 0},
		{"access log without the field", `{"start_time":"2026-01-01T00:00:00Z","status":200}`, "skip", "", 0},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			r := NewReader(strings.NewReader("\n" + tt.line + "\n"))
			req, err := r.Next()
			if tt.want == "skip" {
				if !errors.Is(err, io.EOF) || r.skipped != 1 {
					t.Fatalf("got %v, %v, %d skipped; want EOF after one skipped line", req, err, r.skipped)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			at, _ := time.Parse(time.RFC3339Nano, tt.at)
			if got := describe(req.Req); got != tt.want || !req.Time.Equal(at) || req.Req.HitsAddend != tt.hits {
				t.Errorf("got %s at %v (hits %d); want %s at %v (hits %d)", got, req.Time, req.Req.HitsAddend, tt.want, at, tt.hits)
			}
			if _, err := r.Next(); !errors.Is(err, io.EOF) {
				t.Errorf("second Next: %v, want EOF", err)
			}
		})
	}
}

func TestReaderOverrides(t *testing.T) {
	for _, line := range []string{
		`{"time":"2026-01-01T00:00:00Z","domain":"d","descriptors":[{"entries":[{"key":"a","value":"1"}],"limit":{"requests_per_unit":7,"unit":"minute"}}]}`,
		`{"start_time":"2026-01-01T00:00:00Z","ratelimit":{"domain":"d","descriptors":[{"entries":["a=1"],"limit":"requests_per_unit:7 unit:MINUTE"}]}}`,
	} {
		req, err := NewReader(strings.NewReader(line)).Next()
		if err != nil {
			t.Fatal(err)
		}
		l := req.Req.Descriptors[0].GetLimit()
		if l.GetRequestsPerUnit() != 7 || l.GetUnit().String() != "MINUTE" {
			t.Errorf("%s: override %v, want 7 per MINUTE", line, l)
		}
	}
}

func TestReaderErrors(t *testing.T) {
	good := `{"time":"2026-01-01T00:00:00Z","domain":"d","descriptors":[{"entries":[{"key":"a","value":"1"}]}]}`
	tests := []struct{ name, line, want string }{
		{"not JSON", `time=now`, "line 2: not a JSON object of traffic"},
		{"bad time", `{"time":"yesterday","domain":"d","descriptors":[{"entries":[]}]}`, `line 2: time "yesterday": want RFC 3339`},
		{"no time", `{"domain":"d","descriptors":[{"entries":[]}]}`, `line 2: no "time"`},
		{"neither shape", `{"time":"2026-01-01T00:00:00Z","domian":"d"}`, `line 2: neither a request`},
		{"descriptors without domain", `{"start_time":"2026-01-01T00:00:00Z","descriptors":[{"entries":[]}]}`, `line 2: descriptors without a "domain"`},
		{"entry without =", `{"start_time":"2026-01-01T00:00:00Z","ratelimit":{"domain":"d","descriptors":[{"entries":["a"]}]}}`, `line 2: descriptors[0]: entry "a": want key=value`},
		{"bad unit", `{"time":"2026-01-01T00:00:00Z","domain":"d","descriptors":[{"entries":[{"key":"a","value":"1"}],"limit":{"requests_per_unit":1,"unit":"fortnight"}}]}`, `line 2: descriptors[0].limit: unit "fortnight"`},
		{"too long", `{"time":"` + strings.Repeat("x", maxLineBytes) + `"}`, "line 2: longer than"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			r := NewReader(strings.NewReader(good + "\n" + tt.line + "\n"))
			if _, err := r.Next(); err != nil {
				t.Fatal(err)
			}
			_, err := r.Next()
			if err == nil || !strings.Contains(err.Error(), tt.want) {
				t.Errorf("got %v, want an error containing %q", err, tt.want)
			}
		})
	}
}

// TestReaderIncompleteLastLine: a file copied while it was being written
// ends in part of a line with no newline; that line is skipped and
// counted, the ones before it read. A bad line anywhere else, or a bad
// but complete JSON last line, stays an error.
func TestReaderIncompleteLastLine(t *testing.T) {
	const good = `{"time":"2026-01-01T00:00:00Z","domain":"d","descriptors":[{"entries":[{"key":"a","value":"1"}]}]}`
	for _, tc := range []struct {
		name, text      string
		requests, trunc int
		err             string
	}{
		{"cut last line", good + "\n" + good + "\n" + good[:40], 2, 1, ""},
		{"last line whole without newline", good + "\n" + good, 2, 0, ""},
		{"cut line then newline", good + "\n" + good[:40] + "\n" + good + "\n", 1, 0, "line 2: not a JSON object of traffic"},
		{"cut line in the middle", good + "\n" + good[:40] + "\n" + good, 1, 0, "line 2: not a JSON object of traffic"},
		{"complete bad JSON last", good + "\n" + `{"time":"x"}`, 1, 0, "line 2: neither a request"},
		{"only a cut line", good[:10], 0, 1, ""},
	} {
		t.Run(tc.name, func(t *testing.T) {
			r := NewReader(strings.NewReader(tc.text))
			n := 0
			var err error
			for {
				if _, err = r.Next(); err != nil {
					break
				}
				n++
			}
			if tc.err == "" && !errors.Is(err, io.EOF) || tc.err != "" && !strings.Contains(err.Error(), tc.err) {
				t.Errorf("error %v, want %q", err, tc.err)
			}
			if n != tc.requests || r.truncated != tc.trunc {
				t.Errorf("%d requests, %d truncated; want %d, %d", n, r.truncated, tc.requests, tc.trunc)
			}
		})
	}
}
