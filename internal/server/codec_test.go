package server

import (
	"bytes"
	"context"
	"strings"
	"testing"

	corev3 "github.com/envoyproxy/go-control-plane/envoy/config/core/v3"
	pb "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/mem"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/encoding/protowire"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/durationpb"
	"google.golang.org/protobuf/types/known/structpb"
	"google.golang.org/protobuf/types/known/timestamppb"
	"google.golang.org/protobuf/types/known/wrapperspb"

	"github.com/floodgate/floodgate/internal/rlsmetrics"
	"github.com/floodgate/floodgate/pkg/envoy"
)

// rawCodec sends pre-encoded bytes, which gRPC's own codec would refuse to
// marshal when they hold invalid UTF-8, and decodes answers with proto.
type rawCodec struct{}

func (rawCodec) Name() string { return "proto" }

func (rawCodec) Marshal(v any) ([]byte, error) { return *v.(*[]byte), nil }

func (rawCodec) Unmarshal(b []byte, v any) error {
	*v.(*[]byte) = append([]byte(nil), b...)
	return nil
}

// encode builds a RateLimitRequest by hand: domain, then descriptors of
// key/value entries.
func encode(domain string, descs ...[]string) []byte {
	var b []byte
	b = protowire.AppendTag(b, 1, protowire.BytesType)
	b = protowire.AppendString(b, domain)
	for _, kv := range descs {
		var d []byte
		for i := 0; i+1 < len(kv); i += 2 {
			var e []byte
			e = protowire.AppendTag(e, 1, protowire.BytesType)
			e = protowire.AppendString(e, kv[i])
			e = protowire.AppendTag(e, 2, protowire.BytesType)
			e = protowire.AppendString(e, kv[i+1])
			d = protowire.AppendTag(d, 1, protowire.BytesType)
			d = protowire.AppendBytes(d, e)
		}
		b = protowire.AppendTag(b, 2, protowire.BytesType)
		b = protowire.AppendBytes(b, d)
	}
	return b
}

func TestBadRequestsOverGRPC(t *testing.T) {
	s, _ := running(t, Options{MaxMessageBytes: 4 << 10})
	conn, err := grpc.NewClient(s.Addrs().GRPC.String(), grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	method := "/" + pb.RateLimitService_ServiceDesc.ServiceName + "/ShouldRateLimit"
	manyDescs := make([][]string, envoy.DefaultMaxDescriptors+1)
	for i := range manyDescs {
		manyDescs[i] = []string{"user", "a"}
	}
	tests := []struct {
		name   string
		method string // default: ShouldRateLimit
		req    []byte
		code   codes.Code
		want   string
		// reason is the floodgate_requests_refused_total label counted
		// once for the request; "" for none.
		reason string
	}{
		{"valid", "", encode("srv", []string{"user", "a"}), codes.OK, "", ""},
		{"invalid UTF-8 value", "", encode("srv", []string{"user", "a"}, []string{"user", "ok", "k", "\xff"}), codes.InvalidArgument, "descriptors[1].entries[1].value: not valid UTF-8", "malformed"},
		{"invalid UTF-8 key", "", encode("srv", []string{"us\xc3er", "a"}), codes.InvalidArgument, "descriptors[0].entries[0].key: not valid UTF-8", "malformed"},
		{"invalid UTF-8 domain", "", encode("s\xe2v", []string{"user", "a"}), codes.InvalidArgument, "domain: not valid UTF-8", "malformed"},
		{"not protobuf", "", []byte{0x0a, 0x7f, 's', 'r', 'v'}, codes.InvalidArgument, "invalid RateLimitRequest: ", "malformed"},
		{"truncated", "", []byte{0x0a, 0x03, 's', 0x12, 0x05, 0x0a}, codes.InvalidArgument, "invalid RateLimitRequest: ", "malformed"},
		{"empty key", "", encode("srv", []string{"", "a"}), codes.InvalidArgument, "descriptors[0].entries[0].key: must not be empty", "malformed"},
		{"beyond the bounds", "", encode("srv", manyDescs...), codes.InvalidArgument, "more than the bound of 64 (max descriptors)", "bounds"},
		{"too large", "", encode("srv", []string{"user", strings.Repeat("x", 5<<10)}), codes.ResourceExhausted, "", "too_large"},
		{"unknown method", "/" + pb.RateLimitService_ServiceDesc.ServiceName + "/Nope", encode("srv", []string{"user", "a"}), codes.Unimplemented, "unknown method", "unknown_method"},
		{"unknown service", "/some.Service/Call", encode("srv", []string{"user", "a"}), codes.Unimplemented, "unknown method", "unknown_method"},
		{"still serving after all that", "", encode("srv", []string{"user", "b"}), codes.OK, "", ""},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			before := refusedCounts(t, s)
			m := method
			if tc.method != "" {
				m = tc.method
			}
			var out []byte
			err := conn.Invoke(context.Background(), m, &tc.req, &out, grpc.ForceCodec(rawCodec{}))
			if st := status.Convert(err); st.Code() != tc.code || !strings.Contains(st.Message(), tc.want) {
				t.Errorf("got %v, want %v containing %q", err, tc.code, tc.want)
			}
			checkRefused(t, before, refusedCounts(t, s), tc.reason)
		})
	}
}

// refusedCounts returns floodgate_requests_refused_total by reason.
func refusedCounts(t *testing.T, s *Server) map[string]float64 {
	t.Helper()
	counts := map[string]float64{}
	for _, r := range rlsmetrics.RefusalReasons {
		counts[r] = metricValue(t, s, `floodgate_requests_refused_total{reason="`+r+`"}`)
	}
	return counts
}

// checkRefused fails unless exactly reason ("" for none) went up by one.
func checkRefused(t *testing.T, before, after map[string]float64, reason string) {
	t.Helper()
	for r, n := range after {
		want := before[r]
		if r == reason {
			want++
		}
		if n != want {
			t.Errorf("floodgate_requests_refused_total{reason=%q}: %v, want %v (the request's reason: %q)", r, n, want, reason)
		}
	}
}

func TestBadRequestsOverJSON(t *testing.T) {
	s, _ := running(t, Options{MaxMessageBytes: 8 << 10})
	url := "http://" + s.Addrs().HTTP.String() + "/json"
	tests := []struct {
		name, method, body string
		code               int
		want, reason       string
	}{
		{"valid", "POST", `{"domain":"srv","descriptors":[{"entries":[{"key":"user","value":"j"}]}]}`, 200, "OK", ""},
		{"invalid UTF-8", "POST", "{\"domain\":\"srv\",\"descriptors\":[{\"entries\":[{\"key\":\"user\",\"value\":\"\xff\"}]}]}", 400, "UTF-8", "malformed"},
		{"not JSON", "POST", `{"domain":`, 400, "invalid RateLimitRequest", "malformed"},
		{"unknown field", "POST", `{"domain":"srv","nope":1}`, 400, "invalid RateLimitRequest", "malformed"},
		{"empty key", "POST", `{"domain":"srv","descriptors":[{"entries":[{"key":"","value":"a"}]}]}`, 400, "descriptors[0].entries[0].key: must not be empty", "malformed"},
		{"beyond the bounds", "POST", `{"domain":"srv","descriptors":[{"entries":[{"key":"user","value":"` + strings.Repeat("x", envoy.DefaultMaxValueBytes+1) + `"}]}]}`, 400, "max value bytes", "bounds"},
		{"too large", "POST", `{"domain":"srv","descriptors":[{"entries":[{"key":"user","value":"` + strings.Repeat("x", 9<<10) + `"}]}]}`, 413, "too large", "too_large"},
		{"not POST", "GET", "", 405, "POST a RateLimitRequest", "unknown_method"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			before := refusedCounts(t, s)
			code, body := do(t, tc.method, url, tc.body)
			if code != tc.code || !strings.Contains(body, tc.want) {
				t.Errorf("%d %q, want %d containing %q", code, body, tc.code, tc.want)
			}
			checkRefused(t, before, refusedCounts(t, s), tc.reason)
		})
	}
}

// TestMarshal holds the codec's answers to proto: for answers of every
// shape the service gives, and a few it never does, the bytes decode to
// the answer, and are proto's deterministic bytes but where a map (the
// dynamic metadata) may order its entries otherwise.
func TestMarshal(t *testing.T) {
	meta, err := structpb.NewStruct(map[string]any{"storeFailure": map[string]any{"cause": "deadline", "policy": "allow"}, "b": 1.5, "a": []any{"x", true}})
	if err != nil {
		t.Fatal(err)
	}
	status := func(code pb.RateLimitResponse_Code, rpu, remaining uint32, name string, reset *durationpb.Duration) *pb.RateLimitResponse_DescriptorStatus {
		return &pb.RateLimitResponse_DescriptorStatus{Code: code, LimitRemaining: remaining, DurationUntilReset: reset,
			CurrentLimit: &pb.RateLimitResponse_RateLimit{RequestsPerUnit: rpu, Unit: pb.RateLimitResponse_RateLimit_MINUTE, Name: name}}
	}
	long := strings.Repeat("x", 300) // lengths past one varint byte
	codec := newRequestCodec()
	for _, tc := range []struct {
		name string
		resp *pb.RateLimitResponse
		maps bool // holds a map: same fields, perhaps another order
	}{
		{"empty", &pb.RateLimitResponse{}, false},
		{"ok without limit", &pb.RateLimitResponse{OverallCode: pb.RateLimitResponse_OK,
			Statuses: []*pb.RateLimitResponse_DescriptorStatus{{Code: pb.RateLimitResponse_OK, LimitRemaining: 4294967295}}}, false},
		{"ok", &pb.RateLimitResponse{OverallCode: pb.RateLimitResponse_OK,
			Statuses: []*pb.RateLimitResponse_DescriptorStatus{status(pb.RateLimitResponse_OK, 10, 9, "", durationpb.New(59e9))}}, false},
		{"over with headers and body", &pb.RateLimitResponse{OverallCode: pb.RateLimitResponse_OVER_LIMIT,
			Statuses: []*pb.RateLimitResponse_DescriptorStatus{
				status(pb.RateLimitResponse_OK, 10, 9, "per-ip", durationpb.New(1)),
				status(pb.RateLimitResponse_OVER_LIMIT, 1, 0, "login", &durationpb.Duration{Seconds: 3600, Nanos: -5}),
				{Code: pb.RateLimitResponse_OK, CurrentLimit: &pb.RateLimitResponse_RateLimit{RequestsPerUnit: 7, UnitMultiplier: wrapperspb.UInt32(15)}},
			},
			ResponseHeadersToAdd: []*corev3.HeaderValue{{Key: "x-ratelimit-limit", Value: "10"}, {Key: "Retry-After", Value: "1"}, {Key: "raw", RawValue: []byte{0, 1}}},
			RequestHeadersToAdd:  []*corev3.HeaderValue{{Key: "x-over", Value: long}},
			RawBody:              []byte(`{"code":"OVER_LIMIT"}`)}, false},
		{"long name and metadata", &pb.RateLimitResponse{OverallCode: pb.RateLimitResponse_OK,
			Statuses:        []*pb.RateLimitResponse_DescriptorStatus{status(pb.RateLimitResponse_OK, 1e9, 1e9-1, long, durationpb.New(-2e9))},
			DynamicMetadata: meta}, true},
		{"quota", &pb.RateLimitResponse{OverallCode: pb.RateLimitResponse_OK,
			Statuses: []*pb.RateLimitResponse_DescriptorStatus{{Code: pb.RateLimitResponse_OK,
				Quota: &pb.RateLimitResponse_Quota{Requests: 5, ExpirationSpecifier: &pb.RateLimitResponse_Quota_ValidUntil{ValidUntil: timestamppb.New(timestamppb.Now().AsTime())}}}},
			Quota: &pb.RateLimitResponse_Quota{Requests: 3, Id: "q"}}, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			out, err := codec.Marshal(tc.resp)
			if err != nil {
				t.Fatal(err)
			}
			got := out.Materialize()
			var back pb.RateLimitResponse
			if err := proto.Unmarshal(got, &back); err != nil || !proto.Equal(&back, tc.resp) {
				t.Fatalf("the codec's bytes decode to %v (%v), want %v", &back, err, tc.resp)
			}
			want, err := proto.MarshalOptions{Deterministic: true}.Marshal(tc.resp)
			if err != nil {
				t.Fatal(err)
			}
			if !tc.maps && !bytes.Equal(got, want) {
				t.Fatalf("the codec gives %x\nproto gives     %x", got, want)
			}
		})
	}
}

// TestMarshalAllocations: an answer of the usual shape costs three
// allocations, as from gRPC's own codec: its bytes, and the BufferSlice
// that hands them to gRPC.
func TestMarshalAllocations(t *testing.T) {
	codec := newRequestCodec()
	resp := overLimitAnswer()
	allocs := testing.AllocsPerRun(100, func() {
		out, err := codec.Marshal(resp)
		if err != nil {
			t.Fatal(err)
		}
		out.Free()
	})
	if allocs > 3 {
		t.Fatalf("%v allocations, want at most 3", allocs)
	}
}

// overLimitAnswer is the usual over-limit answer: one descriptor, its
// limit and reset, and one header.
func overLimitAnswer() *pb.RateLimitResponse {
	return &pb.RateLimitResponse{OverallCode: pb.RateLimitResponse_OVER_LIMIT,
		Statuses: []*pb.RateLimitResponse_DescriptorStatus{{Code: pb.RateLimitResponse_OVER_LIMIT,
			CurrentLimit:       &pb.RateLimitResponse_RateLimit{RequestsPerUnit: 10, Unit: pb.RateLimitResponse_RateLimit_SECOND},
			DurationUntilReset: durationpb.New(1e9)}},
		ResponseHeadersToAdd: []*corev3.HeaderValue{{Key: "Retry-After", Value: "1"}}}
}

// BenchmarkCodec compares the codec's request decoding and answer encoding
// with gRPC's proto codec, for cmd/bench's one- and three-descriptor
// requests and an over-limit answer with a header: run both in one go for
// a ratio. The codec's encoding is go-control-plane's generated code with
// -tags vtprotobuf, as the Makefile runs it, and proto's without.
func BenchmarkCodec(b *testing.B) {
	codec := newRequestCodec()
	for _, n := range []int{1, 3} {
		var kvs [][]string
		for k := 1; k <= n; k++ {
			kvs = append(kvs, []string{"key" + string(rune('0'+k)), "v123"})
		}
		req := mem.BufferSlice{mem.SliceBuffer(encode("bench-under", kvs...))}
		b.Run("decode_proto_"+string(rune('0'+n))+"desc", func(b *testing.B) {
			b.ReportAllocs()
			for b.Loop() {
				var r pb.RateLimitRequest
				if err := codec.proto.Unmarshal(req, &r); err != nil {
					b.Fatal(err)
				}
			}
		})
		b.Run("decode_wire_"+string(rune('0'+n))+"desc", func(b *testing.B) {
			b.ReportAllocs()
			for b.Loop() {
				w := getWireRequest()
				if err := codec.Unmarshal(req, w); err != nil || w.refusal != "" {
					b.Fatal(err, w.refusal)
				}
				w.release()
			}
		})
	}
	resp := overLimitAnswer()
	for _, bc := range []struct {
		name    string
		marshal func(any) (mem.BufferSlice, error)
	}{{"encode_proto", codec.proto.Marshal}, {"encode_codec", codec.Marshal}} {
		b.Run(bc.name, func(b *testing.B) {
			b.ReportAllocs()
			for b.Loop() {
				out, err := bc.marshal(resp)
				if err != nil {
					b.Fatal(err)
				}
				out.Free()
			}
		})
	}
}
