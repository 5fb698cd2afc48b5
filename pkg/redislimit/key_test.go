package redislimit_test

import (
	"fmt"
	"math/rand/v2"
	"strings"
	"testing"

	"github.com/floodgate/floodgate/pkg/redislimit"
)

// hashTag returns the part of key Redis Cluster hashes: the bytes between
// the first '{' and the first '}' after it, when not empty; else the key.
func hashTag(key string) string {
	open := strings.IndexByte(key, '{')
	if open < 0 {
		return key
	}
	end := strings.IndexByte(key[open+1:], '}')
	if end <= 0 {
		return key
	}
	return key[open+1 : open+1+end]
}

func TestKeyLayout(t *testing.T) {
	tests := []struct {
		prefix, counter, want string
	}{
		// FNV-1a 64 of "" is its offset basis.
		{"", "", "{cbf29ce484222325}"},
		{"rl_", "", "rl_{cbf29ce484222325}"},
		{"", "a", "{af63dc4c8601ec8c}a"},
		{"p:", "domain\x00key\x00value", "p:{" + fmt.Sprintf("%016x", fnv1a([]byte("domain\x00key\x00value"))) + "}domain\x00key\x00value"},
	}
	for _, tc := range tests {
		if got := redislimit.Key(tc.prefix, tc.counter); got != tc.want {
			t.Errorf("Key(%q, %q) = %q, want %q", tc.prefix, tc.counter, got, tc.want)
		}
		if got := string(redislimit.AppendKey([]byte("x"), tc.prefix, tc.counter)); got != "x"+tc.want {
			t.Errorf("AppendKey(x, %q, %q) = %q, want %q", tc.prefix, tc.counter, got, "x"+tc.want)
		}
	}
}

// fnv1a is an independent FNV-1a 64 for the layout test.
func fnv1a(b []byte) uint64 {
	h := uint64(14695981039346656037)
	for _, c := range b {
		h = (h ^ uint64(c)) * 1099511628211
	}
	return h
}

// collisionCases are counters that naive joining confuses: separators,
// braces (which would move a naive hash tag), newlines, empty parts and
// very long values.
var collisionCases = []string{
	"", "a", "a_b", "a_b_c", "a:b", "a:b:c", "ab", "a\nb", "a\n", "\nb",
	"{a}", "{a}b", "a{b}", "{}", "{", "}", "}{", "{{}}", "a}{b", "{0123456789abcdef}",
	"_", "__", ":", "::", "\x00", "\x00\x00", "é", "\xff\xfe",
	strings.Repeat("x", 4096), strings.Repeat("x", 4097), strings.Repeat("{", 100),
}

// TestKeyInjective is a property test: distinct counters always give
// distinct keys under one prefix, the counter can be read back from the key,
// and Redis Cluster hashes exactly the 16-digit tag, whatever bytes the
// counter holds.
func TestKeyInjective(t *testing.T) {
	rng := rand.New(rand.NewPCG(1, 2))
	alphabet := []byte("ab_:{}\n\x00\xff")
	counters := append([]string(nil), collisionCases...)
	for range 20000 {
		b := make([]byte, rng.IntN(12))
		for i := range b {
			b[i] = alphabet[rng.IntN(len(alphabet))]
		}
		counters = append(counters, string(b))
	}
	for _, prefix := range []string{"", "rl_", "tenant:7:", "x\ny"} {
		seen := make(map[string]string, len(counters))
		for _, c := range counters {
			k := redislimit.Key(prefix, c)
			if other, dup := seen[k]; dup && other != c {
				t.Fatalf("prefix %q: counters %q and %q share key %q", prefix, other, c, k)
			}
			seen[k] = c
			checkKey(t, prefix, c, k)
		}
	}
}

func checkKey(t testing.TB, prefix, counter, key string) {
	t.Helper()
	if !strings.HasPrefix(key, prefix) || key[len(prefix):][18:] != counter {
		t.Fatalf("Key(%q, %q) = %q: counter not recoverable after prefix and tag", prefix, counter, key)
	}
	tag := hashTag(key)
	if want := fmt.Sprintf("%016x", fnv1a([]byte(counter))); tag != want {
		t.Fatalf("Key(%q, %q) = %q: Redis would hash %q, want the tag %q", prefix, counter, key, tag, want)
	}
}

func FuzzKey(f *testing.F) {
	for i, c := range collisionCases {
		f.Add("rl_", c, collisionCases[(i+1)%len(collisionCases)])
	}
	f.Fuzz(func(t *testing.T, prefix, a, b string) {
		if strings.ContainsAny(prefix, "{}") {
			return // rejected by New
		}
		ka, kb := redislimit.Key(prefix, a), redislimit.Key(prefix, b)
		if (ka == kb) != (a == b) {
			t.Fatalf("Key(%q, %q) = %q, Key(%q, %q) = %q", prefix, a, ka, prefix, b, kb)
		}
		checkKey(t, prefix, a, ka)
	})
}

func TestCRC16(t *testing.T) {
	// Vectors from the Redis Cluster specification and its slot examples.
	tests := []struct {
		in   string
		want uint16
	}{
		{"123456789", 0x31c3},
		{"", 0},
	}
	for _, tc := range tests {
		if got := redislimit.CRC16([]byte(tc.in)); got != tc.want {
			t.Errorf("crc16(%q) = %#x, want %#x", tc.in, got, tc.want)
		}
	}
	slots := map[string]uint16{"foo": 12182, "bar": 5061, "hello": 866}
	for in, want := range slots {
		if got := redislimit.CRC16([]byte(in)) % 16384; got != want {
			t.Errorf("slot of %q = %d, want %d", in, got, want)
		}
	}
}

// TestSlotSpread: counters spread over the slots (and so over the masters
// of a Cluster) rather than piling on one.
func TestSlotSpread(t *testing.T) {
	const n = 4000
	slots := make(map[uint16]bool)
	var thirds [3]int
	for i := range n {
		s := redislimit.Slot("rl_", fmt.Sprintf("domain\x00user\x00%d", i))
		slots[s] = true
		thirds[int(s)*3/16384]++
	}
	// 4000 uniform draws from 16384 slots give about 3540 distinct ones.
	if len(slots) < 3300 {
		t.Errorf("%d counters fell in %d slots, want about 3540", n, len(slots))
	}
	for i, c := range thirds {
		if c < n/3-200 || c > n/3+200 {
			t.Errorf("third %d of the slots holds %d of %d counters: %v", i, c, n, thirds)
		}
	}
}
