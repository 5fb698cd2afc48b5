package memcachelimit_test

import (
	"crypto/sha256"
	"encoding/hex"
	"strings"
	"testing"

	"github.com/floodgate/floodgate/internal/memcachelimit"
)

func TestAppendKey(t *testing.T) {
	long := strings.Repeat("x", 300)
	tests := []struct {
		name, prefix string
		start        int64
		counter      string
		want         string
	}{
		{"plain", "rl_", 1700000000000000, "4:demo/3:ip=v9:127.0.0.1", "rl_1700000000000000:4:demo/3:ip=v9:127.0.0.1"},
		{"no prefix", "", 60000000, "k", "60000000:k"},
		{"space, control, percent and UTF-8 escape", "", 0, "a b\n%é", "0:a%20b%0A%25%C3%A9"},
		{"too long: hashed", "p", 5, long, "p5#" + sha256Hex(long)},
		{"long only once escaped: hashed", "", 5, strings.Repeat(" ", 100), "5#" + sha256Hex(strings.Repeat(" ", 100))},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got := string(memcachelimit.AppendKey([]byte("keep"), tt.prefix, tt.start, tt.counter))
			if got != "keep"+tt.want {
				t.Fatalf("AppendKey = %q, want %q", got, "keep"+tt.want)
			}
			if k := got[len("keep"):]; len(k) > memcachelimit.MaxKeyLen || strings.ContainsAny(k, " \r\n\x00") {
				t.Fatalf("key %q is not a Memcached key", k)
			}
		})
	}
}

// Distinct counters and windows never share a key, however their bytes
// line up: escaping is undone byte by byte and the window ends at the
// first ':'.
func TestAppendKeyInjective(t *testing.T) {
	inputs := []struct {
		start   int64
		counter string
	}{
		{1, "2:x"}, {12, ":x"}, {1, "%20"}, {1, " "}, {1, "%2520"}, {1, ""}, {1, "#"}, {-1, "x"}, {1, "-1:x"},
		{1, strings.Repeat("a", 229)}, {1, strings.Repeat("a", 230)}, {1, strings.Repeat("a", 500)}, {1, strings.Repeat("b", 500)},
	}
	seen := map[string]int{}
	for i, in := range inputs {
		k := string(memcachelimit.AppendKey(nil, "p:", in.start, in.counter))
		if len(k) > memcachelimit.MaxKeyLen {
			t.Errorf("%d: key of %d bytes", i, len(k))
		}
		if j, ok := seen[k]; ok {
			t.Errorf("inputs %d and %d share key %q", j, i, k)
		}
		seen[k] = i
	}
}

func sha256Hex(s string) string {
	sum := sha256.Sum256([]byte(s))
	return hex.EncodeToString(sum[:])
}
