package envoy

import (
	"testing"

	rlv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/common/ratelimit/v3"
	pb "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"
	typev3 "github.com/envoyproxy/go-control-plane/envoy/type/v3"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/reflect/protoreflect"
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
	{"one entry", &pb.RateLimitRequest{Domain: "d", Descriptors: []*rlv3.RateLimitDescriptor{desc("k", "v")}}, true},
	{"three descriptors", &pb.RateLimitRequest{Domain: "edge", HitsAddend: 7, Descriptors: []*rlv3.RateLimitDescriptor{
		desc("remote_address", "10.0.0.1"), desc("path", "/login", "method", "POST"), desc("ключ", "значение ☃")}}, true},
	{"empty descriptor and entry", &pb.RateLimitRequest{Domain: "d", Descriptors: []*rlv3.RateLimitDescriptor{{}, {Entries: []*rlv3.RateLimitDescriptor_Entry{{}}}}}, true},
	{"negative hits", &pb.RateLimitRequest{Domain: "d", Descriptors: []*rlv3.RateLimitDescriptor{{IsNegativeHits: true, Entries: desc("k", "v").Entries}}}, true},
	{"limit override", &pb.RateLimitRequest{Domain: "d", Descriptors: []*rlv3.RateLimitDescriptor{{Entries: desc("k", "v").Entries,
		Limit: &rlv3.RateLimitDescriptor_RateLimitOverride{RequestsPerUnit: 5, Unit: typev3.RateLimitUnit_MINUTE}}}}, false},
	{"descriptor hits_addend", &pb.RateLimitRequest{Domain: "d", Descriptors: []*rlv3.RateLimitDescriptor{{Entries: desc("k", "v").Entries,
		HitsAddend: wrapperspb.UInt64(3)}}}, false},
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

// wireFields is, for every message decode reads (the request and what it
// holds down to the entries), each field by name and whether decode takes
// it (true) or leaves the whole request to proto (false). A message that
// decode never enters (a limit override, a wrapper) is proto's whole.
var wireFields = map[protoreflect.FullName]map[protoreflect.Name]bool{
	"envoy.service.ratelimit.v3.RateLimitRequest": {
		"domain": true, "descriptors": true, "hits_addend": true,
	},
	"envoy.extensions.common.ratelimit.v3.RateLimitDescriptor": {
		"entries": true, "is_negative_hits": true, "limit": false, "hits_addend": false,
	},
	"envoy.extensions.common.ratelimit.v3.RateLimitDescriptor.Entry": {
		"key": true, "value": true,
	},
}

// TestWireRequestKnowsEveryField walks, by reflection, the fields of every
// message decode reads, as this build's go-control-plane declares them,
// and fails for a field wireFields does not list: a go-control-plane
// upgrade that adds one must decide whether decode takes it (until then
// every request that sets it goes to proto, correct but slower). Then, for
// each field, a request that sets it only must be taken or left as
// wireFields says, and one that decode takes must equal proto's.
func TestWireRequestKnowsEveryField(t *testing.T) {
	req := (&pb.RateLimitRequest{}).ProtoReflect()
	desc := req.Descriptor().Fields().ByName("descriptors").Message()
	entry := desc.Fields().ByName("entries").Message()
	for _, md := range []protoreflect.MessageDescriptor{req.Descriptor(), desc, entry} {
		listed := wireFields[md.FullName()]
		if listed == nil {
			t.Fatalf("wireFields does not list %s", md.FullName())
		}
		fields := md.Fields()
		for i := range fields.Len() {
			f := fields.Get(i)
			fast, ok := listed[f.Name()]
			if !ok {
				t.Errorf("%s has field %s (%d), which wireFields does not list: does decode take it?", md.FullName(), f.Name(), f.Number())
				continue
			}
			t.Run(string(f.FullName()), func(t *testing.T) { wireTakes(t, md, f, fast) })
		}
		for name := range listed {
			if fields.ByName(name) == nil {
				t.Errorf("wireFields lists %s.%s, which does not exist", md.FullName(), name)
			}
		}
	}
}

// wireTakes encodes a request whose only set field is f of message md (in
// its first descriptor or entry) and checks that decode takes it or not as
// fast says.
func wireTakes(t *testing.T, md protoreflect.MessageDescriptor, f protoreflect.FieldDescriptor, fast bool) {
	req := &pb.RateLimitRequest{}
	var m protoreflect.Message = req.ProtoReflect()
	// Down to a message of md's type: the first descriptor, its first entry.
	for m.Descriptor().FullName() != md.FullName() {
		var next protoreflect.FieldDescriptor
		for _, name := range []protoreflect.Name{"descriptors", "entries"} {
			if next = m.Descriptor().Fields().ByName(name); next != nil {
				break
			}
		}
		list := m.Mutable(next).List()
		list.Append(list.NewElement())
		m = list.Get(0).Message()
	}
	switch {
	case f.IsList():
		list := m.Mutable(f).List()
		list.Append(list.NewElement())
	case f.Message() != nil:
		m.Set(f, protoreflect.ValueOfMessage(m.NewField(f).Message()))
	default:
		m.Set(f, sampleValue(f))
	}
	b, err := proto.Marshal(req)
	if err != nil {
		t.Fatal(err)
	}
	w := getWireRequest()
	defer w.release()
	if got := w.decode(b); got != fast {
		t.Fatalf("decode takes %v: %v, want %v", req, got, fast)
	}
	if fast && !proto.Equal(&w.req, req) {
		t.Fatalf("decoded %v, want %v", &w.req, req)
	}
}

// sampleValue is a value of scalar field f other than its zero value.
func sampleValue(f protoreflect.FieldDescriptor) protoreflect.Value {
	switch f.Kind() {
	case protoreflect.StringKind:
		return protoreflect.ValueOfString("x")
	case protoreflect.BoolKind:
		return protoreflect.ValueOfBool(true)
	case protoreflect.Uint32Kind, protoreflect.Fixed32Kind:
		return protoreflect.ValueOfUint32(7)
	case protoreflect.Uint64Kind, protoreflect.Fixed64Kind:
		return protoreflect.ValueOfUint64(7)
	case protoreflect.Int32Kind, protoreflect.Sint32Kind, protoreflect.Sfixed32Kind:
		return protoreflect.ValueOfInt32(7)
	case protoreflect.Int64Kind, protoreflect.Sint64Kind, protoreflect.Sfixed64Kind:
		return protoreflect.ValueOfInt64(7)
	case protoreflect.EnumKind:
		return protoreflect.ValueOfEnum(1)
	case protoreflect.BytesKind:
		return protoreflect.ValueOfBytes([]byte{7})
	case protoreflect.FloatKind:
		return protoreflect.ValueOfFloat32(7)
	case protoreflect.DoubleKind:
		return protoreflect.ValueOfFloat64(7)
	}
	panic("no sample for " + f.Kind().String())
}
