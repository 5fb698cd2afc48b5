package rules

import (
	"errors"
	"strings"
	"testing"
)

// TestFeed follows a Feed through the pushes a source makes: nothing yet,
// a first set (version 1, not a reload), a refused one, an undecodable one,
// the same set again, and an empty one, which a feed accepts.
func TestFeed(t *testing.T) {
	f := NewFeed(Options{}, nil)
	if st := f.Status(); st.Version != 0 || len(f.Current().Domains()) != 0 {
		t.Fatalf("new feed: status %+v, domains %v; want version 0, no rules", st, f.Current().Domains())
	}
	select {
	case <-f.Loaded():
		t.Fatal("Loaded closed before any push")
	default:
	}
	good := map[string][]byte{"xds/a": []byte("domain: a\ndescriptors:\n  - key: k\n    rate_limit: {unit: minute, requests_per_unit: 3}\n")}
	steps := []struct {
		name    string
		push    func() error
		wantErr string
		want    Status // Version, Origin, Reloads, Failures
		domains int
	}{
		{"first", func() error { return f.Push("v1", good) }, "", Status{Version: 1, Origin: "v1"}, 1},
		{"refused", func() error {
			return f.Push("v2", map[string][]byte{"xds/a": []byte("domain: a\ndescriptors:\n  - key: k\n    rate_limit: {unit: fortnight}\n")})
		}, "xds/a:4:", Status{Version: 1, Origin: "v1", Reloads: 1, Failures: 1}, 1},
		{"undecodable", func() error { f.Refuse("v3", errors.New("xds/b: does not decode")); return nil }, "",
			Status{Version: 1, Origin: "v1", Reloads: 2, Failures: 2}, 1},
		{"same again", func() error { return f.Push("v4", good) }, "", Status{Version: 1, Origin: "v4", Reloads: 3, Failures: 2}, 1},
		{"empty", func() error { return f.Push("v5", nil) }, "", Status{Version: 2, Origin: "v5", Reloads: 4, Failures: 2}, 0},
	}
	for _, s := range steps {
		err := s.push()
		if (err == nil) != (s.wantErr == "") || err != nil && !strings.Contains(err.Error(), s.wantErr) {
			t.Errorf("%s: error %v, want %q", s.name, err, s.wantErr)
		}
		st := f.Status()
		if st.Version != s.want.Version || st.Origin != s.want.Origin || st.Reloads != s.want.Reloads || st.Failures != s.want.Failures {
			t.Errorf("%s: status %+v, want %+v", s.name, st, s.want)
		}
		if f.Current().Version() != st.Version || len(f.Current().Domains()) != s.domains {
			t.Errorf("%s: current set version %d with %d domains, want %d with %d", s.name, f.Current().Version(), len(f.Current().Domains()), st.Version, s.domains)
		}
	}
	select {
	case <-f.Loaded():
	default:
		t.Error("Loaded not closed after a good push")
	}
}

// TestFeedPushedAndSource checks that a Feed keeps the files of its last
// push, good or refused, which the positions of its errors point into, and
// the state its source reports.
func TestFeedPushedAndSource(t *testing.T) {
	f := NewFeed(Options{}, nil)
	if origin, files := f.Pushed(); origin != "" || files != nil || f.Status().Source != "" {
		t.Fatalf("new feed: pushed %q %v, source %q; want nothing", origin, files, f.Status().Source)
	}
	good := map[string][]byte{"xds/a": []byte("domain: a\ndescriptors:\n  - key: k\n    rate_limit: {unit: second, requests_per_unit: 1}\n")}
	bad := map[string][]byte{"xds/a": []byte("domain: a\ndescriptors:\n  - key: k\n    rate_limit: {unit: fortnight, requests_per_unit: 1}\n")}
	for _, push := range []struct {
		origin string
		files  map[string][]byte
		ok     bool
	}{{"1", good, true}, {"2", bad, false}} {
		err := f.Push(push.origin, push.files)
		if (err == nil) != push.ok {
			t.Fatalf("push %s: %v", push.origin, err)
		}
		origin, files := f.Pushed()
		if origin != push.origin || string(files["xds/a"]) != string(push.files["xds/a"]) {
			t.Errorf("after push %s: Pushed = %q %q", push.origin, origin, files["xds/a"])
		}
	}
	if err := f.Status().LastError; err == nil || !strings.Contains(err.Error(), "xds/a:4:") {
		t.Errorf("last error %v, want a position in xds/a, which Pushed serves", err)
	}
	f.SetSource("connected")
	if got := f.Status().Source; got != "connected" {
		t.Errorf("Source = %q, want connected", got)
	}
}
