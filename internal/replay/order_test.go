package replay

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"math/rand/v2"
	"sort"
	"strings"
	"testing"
	"time"

	"github.com/floodgate/floodgate/internal/capture"
	"github.com/floodgate/floodgate/pkg/rules"
)

// lines renders requests of domain d at t0 plus each offset in
// milliseconds, each with the value "<name>@<offset>", so that a test can
// tell which line came out.
func lines(name string, offsets ...int) string {
	var b strings.Builder
	for _, ms := range offsets {
		fmt.Fprintf(&b, `{"time":%q,"domain":"d","descriptors":[{"entries":[{"key":"k","value":"%s@%d"}]}]}`+"\n",
			t0.Add(time.Duration(ms)*time.Millisecond).Format(time.RFC3339Nano), name, ms)
	}
	return b.String()
}

// drain reads traffic to its end, and returns the values in order.
func drain(tr *Traffic) ([]string, error) {
	var got []string
	for {
		r, err := tr.Next()
		if errors.Is(err, io.EOF) {
			return got, nil
		}
		if err != nil {
			return got, err
		}
		got = append(got, r.Req.Descriptors[0].Entries[0].Value)
	}
}

func TestMerge(t *testing.T) {
	for _, tt := range []struct {
		name      string
		reorder   int
		inputs    map[string]string // name: lines, merged in name order
		want      string            // values in order, or the error
		reordered []int             // per input
	}{
		{"one file in order", 0, map[string]string{"a": lines("a", 0, 5, 5, 9)}, "a@0 a@5 a@5 a@9", []int{0}},
		{"two replicas interleaved; the same time keeps the inputs' order", 0,
			map[string]string{"a": lines("a", 0, 10, 20, 30), "b": lines("b", 5, 10, 25)},
			"a@0 b@5 a@10 b@10 a@20 b@25 a@30", []int{0, 0}},
		{"a few lines swapped within the bound", 3, map[string]string{"a": lines("a", 0, 20, 10, 30, 50, 40)},
			"a@0 a@10 a@20 a@30 a@40 a@50", []int{2}},
		{"replicas concatenated in one file, within the bound", 0, map[string]string{"a": lines("a", 0, 10, 20) + lines("b", 5, 15)},
			"a@0 b@5 a@10 b@15 a@20", []int{2}},
		{"out of order by more than the bound", 2, map[string]string{"a": lines("a", 10, 20, 30, 40, 5)},
			"a: line 5 (2026-01-01T00:00:00.005000Z) is older than line 3 (2026-01-01T00:00:00.030000Z), which had to be replayed first: out of time order by more than 2 requests", nil},
		{"a bound of 1 refuses any disorder", 1, map[string]string{"a": lines("a", 10, 5)},
			"a: line 2 (2026-01-01T00:00:00.005000Z) is older than line 1", nil},
		{"a bad line names its input", 0, map[string]string{"a": lines("a", 0), "b": lines("b", 1) + "oops\n"},
			"b: line 2: not a JSON object of traffic", nil},
		{"empty inputs", 0, map[string]string{"a": "", "b": "\n"}, "", []int{0, 0}},
	} {
		t.Run(tt.name, func(t *testing.T) {
			var names []string
			for n := range tt.inputs {
				names = append(names, n)
			}
			sort.Strings(names)
			var inputs []Input
			for _, n := range names {
				inputs = append(inputs, Input{Name: n, Reader: NewReader(strings.NewReader(tt.inputs[n]))})
			}
			tr := Merge(tt.reorder, inputs...)
			got, err := drain(tr)
			if tt.reordered == nil {
				if err == nil || !strings.Contains(err.Error(), tt.want) {
					t.Fatalf("got %v, %v; want the error %q", got, err, tt.want)
				}
				if strings.Contains(tt.want, "older than") && !errors.Is(err, ErrOutOfOrder) {
					t.Errorf("%v does not wrap ErrOutOfOrder", err)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if strings.Join(got, " ") != tt.want {
				t.Errorf("got %s, want %s", strings.Join(got, " "), tt.want)
			}
			for i, st := range tr.Stats() {
				if st.Name != names[i] || st.Reordered != tt.reordered[i] {
					t.Errorf("stats %+v; want %s with %d reordered", st, names[i], tt.reordered[i])
				}
			}
		})
	}
}

// replicaTraffic is a day's worth of requests of two replicas, in a few
// minutes: each replica's requests in time order, the two interleaved in
// time, and all of them sorted.
func replicaTraffic() (a, b, sorted string) {
	rng := rand.New(rand.NewPCG(1, 2))
	type line struct {
		at   time.Duration
		text string
	}
	var all, ra, rb []line
	for _, r := range []*[]line{&ra, &rb} {
		at := time.Duration(0)
		for range 3000 {
			at += time.Duration(rng.IntN(80)) * time.Millisecond
			l := line{at, fmt.Sprintf(`{"time":%q,"domain":"d","descriptors":[{"entries":[{"key":"k","value":"c%d"}]}]}`+"\n",
				t0.Add(at).Format(capture.TimeLayout), rng.IntN(5))}
			*r = append(*r, l)
			all = append(all, l)
		}
	}
	sort.SliceStable(all, func(i, j int) bool { return all[i].at < all[j].at })
	join := func(ls []line) string {
		var s strings.Builder
		for _, l := range ls {
			s.WriteString(l.text)
		}
		return s.String()
	}
	return join(ra), join(rb), join(all)
}

// TestReplayReplicas: two replicas' captures, given as two inputs or
// concatenated in one within the bound, replay exactly as the same
// requests sorted; concatenated beyond the bound, they are refused, never
// decided at the wrong time.
func TestReplayReplicas(t *testing.T) {
	set, err := rules.Parse(map[string][]byte{"d.yaml": []byte("domain: d\ndescriptors:\n  - key: k\n    rate_limit: {unit: second, requests_per_unit: 10}\n")}, rules.Options{})
	if err != nil {
		t.Fatal(err)
	}
	tight, err := rules.Parse(map[string][]byte{"d.yaml": []byte("domain: d\ndescriptors:\n  - key: k\n    rate_limit: {unit: second, requests_per_unit: 4}\n")}, rules.Options{})
	if err != nil {
		t.Fatal(err)
	}
	a, b, sorted := replicaTraffic()
	report := func(tr *Traffic) (string, *Report, error) {
		rep, err := Run(context.Background(), set, tight, tr, Options{})
		if err != nil {
			return "", nil, err
		}
		rep.Traffic, rep.Reordered = nil, 0
		var js bytes.Buffer
		if err := rep.WriteJSON(&js); err != nil {
			t.Fatal(err)
		}
		return js.String(), rep, nil
	}
	in := func(name, text string) Input { return Input{Name: name, Reader: NewReader(strings.NewReader(text))} }
	want, rep, err := report(Merge(0, in("sorted", sorted)))
	if err != nil {
		t.Fatal(err)
	}
	if rep.Requests != 6000 || rep.Changed.Total == 0 || rep.Old.Denied == 0 {
		t.Fatalf("the traffic tests nothing: %d requests, %d changed, %d denied", rep.Requests, rep.Changed.Total, rep.Old.Denied)
	}
	// One rule refuses every request denied: it shows every change.
	if r := rep.Rules[0]; len(rep.Rules) != 1 || r.NowDenied != rep.Changed.NowDenied || r.NowAllowed != rep.Changed.NowAllowed {
		t.Errorf("rule %+v: want the %d now denied and %d now allowed of the report", r, rep.Changed.NowDenied, rep.Changed.NowAllowed)
	}
	for _, tt := range []struct {
		name   string
		inputs []Input
	}{
		{"two files", []Input{in("a", a), in("b", b)}},
		{"two files, the other way round", []Input{in("b", b), in("a", a)}},
		{"concatenated, within the bound", []Input{in("a+b", a+b)}},
	} {
		got, _, err := report(Merge(0, tt.inputs...))
		if err != nil {
			t.Fatalf("%s: %v", tt.name, err)
		}
		if got != want {
			t.Errorf("%s: the report differs from the sorted traffic's", tt.name)
		}
	}
	_, _, err = report(Merge(1000, in("a+b", a+b)))
	if !errors.Is(err, ErrOutOfOrder) || !strings.Contains(err.Error(), "a+b: line 3001 (") {
		t.Errorf("concatenated beyond the bound: %v; want ErrOutOfOrder at a+b line 3001", err)
	}
}

// TestRunRefusesDisorder: the replay itself refuses a request older than
// the last one, should its traffic ever hand one.
func TestRunRefusesDisorder(t *testing.T) {
	set, err := rules.Parse(map[string][]byte{"d.yaml": []byte("domain: d\ndescriptors:\n  - key: k\n    rate_limit: {unit: second, requests_per_unit: 1}\n")}, rules.Options{})
	if err != nil {
		t.Fatal(err)
	}
	rp, err := newReplayer(set, set, Options{})
	if err != nil {
		t.Fatal(err)
	}
	r := NewReader(strings.NewReader(lines("a", 10, 5)))
	for i, want := range []bool{true, false} {
		req, err := r.Next()
		if err != nil {
			t.Fatal(err)
		}
		err = rp.request(context.Background(), req)
		if ok := err == nil; ok != want || !ok && !errors.Is(err, ErrOutOfOrder) {
			t.Errorf("request %d: %v", i+1, err)
		}
	}
	if rp.rep.Requests != 1 {
		t.Errorf("%d requests replayed, want 1", rp.rep.Requests)
	}
}
