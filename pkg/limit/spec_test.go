package limit_test

import (
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/floodgate/floodgate/pkg/limit"
)

// TestSpecValidate: Validate names every problem of a spec with the
// parameter at fault; Hit.Validate, the stores' check, refuses the same
// specs except those whose problem a store can do without.
func TestSpecValidate(t *testing.T) {
	sec := time.Second
	utc := time.UTC
	type problem struct {
		param string
		msg   string
	}
	tests := []struct {
		name      string
		spec      limit.Spec
		want      []problem // nil: valid
		evaluable bool      // a store evaluates it anyway
	}{
		{"fixed window", limit.Spec{Limit: 5, Window: sec}, nil, true},
		{"zero limit", limit.Spec{Window: sec}, nil, true},
		{"bucket with a burst", limit.Spec{Algorithm: limit.GCRA, Limit: 5, Window: sec, Burst: 9}, nil, true},
		{"sliding window at 1ms sub-windows", limit.Spec{Algorithm: limit.SlidingWindow, Limit: 5, Window: sec, Precision: 1000}, nil, true},
		{"calendar day", limit.Spec{Limit: 5, Window: 24 * time.Hour, Calendar: utc}, nil, true},
		{"sliding log at the bound", limit.Spec{Algorithm: limit.SlidingLog, Limit: limit.MaxSlidingLog, Window: sec}, nil, true},

		{"unknown algorithm", limit.Spec{Algorithm: 99, Limit: 5, Window: sec},
			[]problem{{"algorithm", "unknown algorithm 99"}}, false},
		{"no window", limit.Spec{Limit: 5},
			[]problem{{"window", "window 0s is shorter than 1ms"}}, false},
		{"negative limit", limit.Spec{Limit: -1, Window: sec},
			[]problem{{"limit", "negative limit -1"}}, false},
		{"negative burst", limit.Spec{Algorithm: limit.TokenBucket, Limit: 1, Window: sec, Burst: -2},
			[]problem{{"burst", "negative burst -2"}}, false},
		{"sub-windows under 1ms", limit.Spec{Algorithm: limit.SlidingWindow, Limit: 5, Window: sec, Precision: 1001},
			[]problem{{"precision", "1001 sub-windows of a 1s window are shorter than 1ms (want at most 1000)"}}, false},
		{"calendar of 2 days", limit.Spec{Limit: 5, Window: 48 * time.Hour, Calendar: utc},
			[]problem{{"calendar", "a calendar window is a day, a week, 30 days (a month) or 365 days (a year), not 48h0m0s"}}, false},
		{"calendar on a sliding window", limit.Spec{Algorithm: limit.SlidingWindow, Limit: 5, Window: 24 * time.Hour, Calendar: utc},
			[]problem{{"calendar", "a calendar window needs algorithm fixed_window, not sliding_window"}}, false},

		{"burst on a fixed window", limit.Spec{Limit: 5, Window: sec, Burst: 3},
			[]problem{{"burst", "fixed_window has no burst (burst applies to token_bucket, leaky_bucket and gcra)"}}, true},
		{"precision on a token bucket", limit.Spec{Algorithm: limit.TokenBucket, Limit: 5, Window: sec, Precision: 4},
			[]problem{{"precision", "token_bucket has no precision (precision applies to sliding_window)"}}, true},
		{"sliding log above the bound", limit.Spec{Algorithm: limit.SlidingLog, Limit: limit.MaxSlidingLog + 1, Window: sec},
			[]problem{{"limit", "sliding_log of 2001 per window: a sliding log keeps up to one entry per admitted hit, and above 2000 per window"}}, true},
		{"every problem at once", limit.Spec{Algorithm: limit.SlidingLog, Limit: 3000, Window: sec, Burst: 2, Precision: 2, Calendar: utc},
			[]problem{
				{"limit", "sliding_log of 3000"},
				{"burst", "sliding_log has no burst"},
				{"precision", "sliding_log has no precision"},
				{"calendar", "not sliding_log"},
			}, false},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			err := tt.spec.Validate()
			if (err != nil) != (tt.want != nil) {
				t.Fatalf("Validate() = %v, want %d problems", err, len(tt.want))
			}
			var got []*limit.SpecError
			if u, ok := err.(interface{ Unwrap() []error }); ok {
				for _, e := range u.Unwrap() {
					var se *limit.SpecError
					if !errors.As(e, &se) {
						t.Fatalf("Validate() holds %v, want *SpecError", e)
					}
					got = append(got, se)
				}
			}
			if len(got) != len(tt.want) {
				t.Fatalf("Validate() = %v, want %d problems", err, len(tt.want))
			}
			for i, w := range tt.want {
				if got[i].Param != w.param || !strings.Contains(got[i].Msg, w.msg) {
					t.Errorf("problem %d = %v: %q, want %v: %q...", i, got[i].Param, got[i].Msg, w.param, w.msg)
				}
			}
			hitErr := limit.Hit{Key: "k", Spec: tt.spec, Cost: 1}.Validate()
			if (hitErr == nil) != tt.evaluable {
				t.Errorf("Hit.Validate() = %v, want evaluable %v", hitErr, tt.evaluable)
			}
			if hitErr != nil && !errors.Is(hitErr, limit.ErrInvalidSpec) {
				t.Errorf("Hit.Validate() = %v, want it to wrap ErrInvalidSpec", hitErr)
			}
		})
	}
}

// TestAlgorithmTakes: which algorithm takes which optional parameter, as
// Spec's field docs say; every algorithm takes the others.
func TestAlgorithmTakes(t *testing.T) {
	takes := map[string][]limit.Algorithm{
		"burst":     {limit.TokenBucket, limit.LeakyBucket, limit.GCRA},
		"precision": {limit.SlidingWindow},
		"calendar":  {limit.FixedWindow},
	}
	for _, p := range []string{"algorithm", "limit", "window", "burst", "precision", "calendar"} {
		for _, a := range limit.Algorithms() {
			want := takes[p] == nil
			for _, x := range takes[p] {
				want = want || x == a
			}
			if got := a.Takes(p); got != want {
				t.Errorf("%v.Takes(%v) = %v, want %v", a, p, got, want)
			}
			if p == "burst" && a.HasBurst() != want {
				t.Errorf("%v.HasBurst() = %v, want %v", a, a.HasBurst(), want)
			}
		}
	}
}
