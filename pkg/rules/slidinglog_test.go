package rules

import (
	"strings"
	"testing"
)

// TestSlidingLogBound: a sliding_log above slidingLogMax per window is
// refused at its requests_per_unit's file:line:column, saying why and what
// to use instead; at the bound it loads, with the costly warning.
func TestSlidingLogBound(t *testing.T) {
	tests := []struct {
		name    string
		lines   []string
		wantErr string // "" when the file loads
	}{
		{"at the bound", []string{"unit: minute", "requests_per_unit: 2000", "algorithm: sliding_log"}, ""},
		{"one above", []string{"unit: minute", "requests_per_unit: 2001", "algorithm: sliding_log"},
			"w.yaml:6:26: descriptors[0].rate_limit.requests_per_unit: sliding_log of 2001 per window: a sliding log keeps up to one entry per admitted hit, and above 2000 per window"},
		{"the issue's 100,000,000 per hour", []string{"unit: hour", "requests_per_unit: 100000000", "algorithm: sliding_log"},
			"w.yaml:6:26: descriptors[0].rate_limit.requests_per_unit: sliding_log of 100000000 per window"},
		{"over a longer window too", []string{"unit: second", "unit_multiplier: 60", "requests_per_unit: 5000", "algorithm: sliding_log"},
			"w.yaml:7:26: descriptors[0].rate_limit.requests_per_unit: sliding_log of 5000 per window"},
		{"other algorithms are not bounded", []string{"unit: hour", "requests_per_unit: 100000000", "algorithm: sliding_window", "precision: 60"}, ""},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			_, err := Parse(map[string][]byte{"w.yaml": []byte(limitFile(tt.lines...))}, Options{})
			if tt.wantErr == "" {
				if err != nil {
					t.Fatalf("refused: %v", err)
				}
				return
			}
			if err == nil {
				t.Fatal("loaded")
			}
			if !strings.Contains(err.Error(), tt.wantErr) || !strings.Contains(err.Error(), "use sliding_window with a precision") {
				t.Errorf("error %q\nwant it to contain %q and suggest sliding_window", err, tt.wantErr)
			}
		})
	}
}
