package server

import (
	"testing"

	rlv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/common/ratelimit/v3"
	pb "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"
	typev3 "github.com/envoyproxy/go-control-plane/envoy/type/v3"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/wrapperspb"
)

// wireCases are requests of every shape: those Envoy sends, which decode
// takes, and the others, which it leaves to proto.
var wireCases = []struct {
	name string
	req  *pb.RateLimitRequest
	fast bool // decode takes it
}{
	{"empty", &pb.RateLimitRequest{}, true},
	{"domain only", &pb.RateLimitRequest{Domain: "d"}, true},
	{"one entry", &pb.RateLimitRequest{Domain: "d", Descriptors: []*rlv3.RateLimitDescriptor{descOf("k", "v")}}, true},
	{"three descriptors", &pb.RateLimitRequest{Domain: "edge", HitsAddend: 7, Descriptors: []*rlv3.RateLimitDescriptor{
		descOf("remote_address", "10.0.0.1"), descOf("path", "/login", "method", "POST"), descOf("ключ", "значение ☃")}}, true},
	{"empty descriptor and entry", &pb.RateLimitRequest{Domain: "d", Descriptors: []*rlv3.RateLimitDescriptor{{}, {Entries: []*rlv3.RateLimitDescriptor_Entry{{}}}}}, true},
	{"negative hits", &pb.RateLimitRequest{Domain: "d", Descriptors: []*rlv3.RateLimitDescriptor{{IsNegativeHits: true, Entries: descOf("k", "v").Entries}}}, true},
	{"limit override", &pb.RateLimitRequest{Domain: "d", Descriptors: []*rlv3.RateLimitDescriptor{{Entries: descOf("k", "v").Entries,
		Limit: &rlv3.RateLimitDescriptor_RateLimitOverride{RequestsPerUnit: 5, Unit: typev3.RateLimitUnit_MINUTE}}}}, false},
	{"descriptor hits_addend", &pb.RateLimitRequest{Domain: "d", Descriptors: []*rlv3.RateLimitDescriptor{{Entries: descOf("k", "v").Entries,
		HitsAddend: wrapperspb.UInt64(3)}}}, false},
}

func descOf(kv ...string) *rlv3.RateLimitDescriptor {
	d := &rlv3.RateLimitDescriptor{}
	for i := 0; i+1 < len(kv); i += 2 {
		d.Entries = append(d.Entries, &rlv3.RateLimitDescriptor_Entry{Key: kv[i], Value: kv[i+1]})
	}
	return d
}

func TestWireRequest(t *testing.T) {
	for _, tc := range wireCases {
		t.Run(tc.name, func(t *testing.T) {
			b, err := proto.Marshal(tc.req)
			if err != nil {
				t.Fatal(err)
			}
			w := getWireRequest()
			defer w.release()
			if got := w.decode(b); got != tc.fast {
				t.Fatalf("decode took it: %v, want %v", got, tc.fast)
			}
			if tc.fast && !proto.Equal(&w.req, tc.req) {
				t.Fatalf("decoded %v, want %v", &w.req, tc.req)
			}
			// The storage is reused: a second request decodes cleanly
			// into it.
			w.reset()
			if !w.decode(encode("other", []string{"a", "b"})) || w.req.Domain != "other" || len(w.req.Descriptors) != 1 ||
				w.req.Descriptors[0].Entries[0].Value != "b" || w.req.Descriptors[0].IsNegativeHits {
				t.Fatalf("after reuse: %v", &w.req)
			}
		})
	}
}

// TestWireRequestInvalidUTF8 leaves invalid strings to proto, which names
// them.
func TestWireRequestInvalidUTF8(t *testing.T) {
	w := getWireRequest()
	defer w.release()
	if w.decode(encode("d", []string{"k", "\xff"})) {
		t.Fatal("decode took an invalid UTF-8 value")
	}
	if w.decode(encode("\xfe", []string{"k", "v"})) {
		t.Fatal("decode took an invalid UTF-8 domain")
	}
}

// TestWireRequestAllocations: one allocation per request, its strings.
func TestWireRequestAllocations(t *testing.T) {
	b := encode("bench", []string{"key1", "v1"}, []string{"key2", "v2"}, []string{"key3", "v3"})
	w := getWireRequest()
	allocs := testing.AllocsPerRun(100, func() {
		w.reset()
		if !w.decode(b) {
			t.Fatal("not decoded")
		}
	})
	if allocs != 1 {
		t.Fatalf("%v allocations per request, want 1", allocs)
	}
}

// FuzzWireRequest checks decode against proto: whatever decode takes, proto
// decodes to an equal message.
func FuzzWireRequest(f *testing.F) {
	for _, tc := range wireCases {
		b, err := proto.Marshal(tc.req)
		if err != nil {
			f.Fatal(err)
		}
		f.Add(b)
	}
	f.Add(encode("d", []string{"k", "\xff"}))
	f.Add([]byte{0x0a, 0x80})
	f.Fuzz(func(t *testing.T, b []byte) {
		w := getWireRequest()
		defer w.release()
		if !w.decode(b) {
			return
		}
		var want pb.RateLimitRequest
		if err := proto.Unmarshal(b, &want); err != nil {
			t.Fatalf("decode took %x, which proto refuses: %v", b, err)
		}
		if !proto.Equal(&w.req, &want) {
			t.Fatalf("decode(%x) = %v, proto says %v", b, &w.req, &want)
		}
	})
}
