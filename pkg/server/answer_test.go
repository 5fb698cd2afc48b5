package server

import (
	"bytes"
	"strings"
	"testing"

	corev3 "github.com/envoyproxy/go-control-plane/envoy/config/core/v3"
	pb "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"
	"google.golang.org/grpc/mem"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/durationpb"
	"google.golang.org/protobuf/types/known/structpb"
	"google.golang.org/protobuf/types/known/timestamppb"
	"google.golang.org/protobuf/types/known/wrapperspb"
)

// TestAppendResponse holds appendResponse to proto's deterministic bytes
// for answers of every shape the service gives, and a few it never does.
func TestAppendResponse(t *testing.T) {
	meta, err := structpb.NewStruct(map[string]any{"storeFailure": map[string]any{"cause": "deadline", "policy": "allow"}, "b": 1.5, "a": []any{"x", true}})
	if err != nil {
		t.Fatal(err)
	}
	status := func(code pb.RateLimitResponse_Code, rpu, remaining uint32, name string, reset *durationpb.Duration) *pb.RateLimitResponse_DescriptorStatus {
		return &pb.RateLimitResponse_DescriptorStatus{Code: code, LimitRemaining: remaining, DurationUntilReset: reset,
			CurrentLimit: &pb.RateLimitResponse_RateLimit{RequestsPerUnit: rpu, Unit: pb.RateLimitResponse_RateLimit_MINUTE, Name: name}}
	}
	long := strings.Repeat("x", 300) // lengths past one varint byte
	for _, tc := range []struct {
		name string
		resp *pb.RateLimitResponse
	}{
		{"empty", &pb.RateLimitResponse{}},
		{"ok without limit", &pb.RateLimitResponse{OverallCode: pb.RateLimitResponse_OK,
			Statuses: []*pb.RateLimitResponse_DescriptorStatus{{Code: pb.RateLimitResponse_OK, LimitRemaining: 4294967295}}}},
		{"ok", &pb.RateLimitResponse{OverallCode: pb.RateLimitResponse_OK,
			Statuses: []*pb.RateLimitResponse_DescriptorStatus{status(pb.RateLimitResponse_OK, 10, 9, "", durationpb.New(59e9))}}},
		{"over with headers and body", &pb.RateLimitResponse{OverallCode: pb.RateLimitResponse_OVER_LIMIT,
			Statuses: []*pb.RateLimitResponse_DescriptorStatus{
				status(pb.RateLimitResponse_OK, 10, 9, "per-ip", durationpb.New(1)),
				status(pb.RateLimitResponse_OVER_LIMIT, 1, 0, "login", &durationpb.Duration{Seconds: 3600, Nanos: -5}),
				{Code: pb.RateLimitResponse_OK, CurrentLimit: &pb.RateLimitResponse_RateLimit{RequestsPerUnit: 7, UnitMultiplier: wrapperspb.UInt32(15)}},
			},
			ResponseHeadersToAdd: []*corev3.HeaderValue{{Key: "x-ratelimit-limit", Value: "10"}, {Key: "Retry-After", Value: "1"}, {Key: "raw", RawValue: []byte{0, 1}}},
			RequestHeadersToAdd:  []*corev3.HeaderValue{{Key: "x-over", Value: long}},
			RawBody:              []byte(`{"code":"OVER_LIMIT"}`)}},
		{"long name and metadata", &pb.RateLimitResponse{OverallCode: pb.RateLimitResponse_OK,
			Statuses:        []*pb.RateLimitResponse_DescriptorStatus{status(pb.RateLimitResponse_OK, 1e9, 1e9-1, long, durationpb.New(-2e9))},
			DynamicMetadata: meta}},
		{"quota", &pb.RateLimitResponse{OverallCode: pb.RateLimitResponse_OK,
			Statuses: []*pb.RateLimitResponse_DescriptorStatus{{Code: pb.RateLimitResponse_OK,
				Quota: &pb.RateLimitResponse_Quota{Requests: 5, ExpirationSpecifier: &pb.RateLimitResponse_Quota_ValidUntil{ValidUntil: timestamppb.New(timestamppb.Now().AsTime())}}}},
			Quota: &pb.RateLimitResponse_Quota{Requests: 3, Id: "q"}}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			want, err := proto.MarshalOptions{Deterministic: true}.Marshal(tc.resp)
			if err != nil {
				t.Fatal(err)
			}
			got := appendResponse([]byte("prefix"), tc.resp)
			if !bytes.Equal(got[len("prefix"):], want) {
				t.Fatalf("appendResponse = %x\nproto gives    %x", got[len("prefix"):], want)
			}
		})
	}
}

// TestAppendResponseAllocations: an answer of the usual shape encodes
// into a buffer with room without allocating.
func TestAppendResponseAllocations(t *testing.T) {
	resp := &pb.RateLimitResponse{OverallCode: pb.RateLimitResponse_OVER_LIMIT,
		Statuses: []*pb.RateLimitResponse_DescriptorStatus{{Code: pb.RateLimitResponse_OVER_LIMIT, LimitRemaining: 0,
			CurrentLimit:       &pb.RateLimitResponse_RateLimit{RequestsPerUnit: 10, Unit: pb.RateLimitResponse_RateLimit_SECOND},
			DurationUntilReset: durationpb.New(1e9)}},
		ResponseHeadersToAdd: []*corev3.HeaderValue{{Key: "Retry-After", Value: "1"}}}
	buf := make([]byte, 0, answerBufferSize)
	if allocs := testing.AllocsPerRun(100, func() { buf = appendResponse(buf[:0], resp) }); allocs != 0 {
		t.Fatalf("%v allocations, want 0", allocs)
	}
}

// BenchmarkCodec compares the codec's request decoding and answer encoding
// with proto's, for cmd/bench's one- and three-descriptor requests and
// an over-limit answer with headers: run both in one go for a ratio.
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
	resp := &pb.RateLimitResponse{OverallCode: pb.RateLimitResponse_OVER_LIMIT,
		Statuses: []*pb.RateLimitResponse_DescriptorStatus{{Code: pb.RateLimitResponse_OVER_LIMIT,
			CurrentLimit:       &pb.RateLimitResponse_RateLimit{RequestsPerUnit: 10, Unit: pb.RateLimitResponse_RateLimit_SECOND},
			DurationUntilReset: durationpb.New(1e9)}},
		ResponseHeadersToAdd: []*corev3.HeaderValue{{Key: "Retry-After", Value: "1"}}}
	for name, marshal := range map[string]func(any) (mem.BufferSlice, error){"encode_proto": codec.proto.Marshal, "encode_append": codec.Marshal} {
		b.Run(name, func(b *testing.B) {
			b.ReportAllocs()
			for b.Loop() {
				out, err := marshal(resp)
				if err != nil {
					b.Fatal(err)
				}
				out.Free()
			}
		})
	}
}
