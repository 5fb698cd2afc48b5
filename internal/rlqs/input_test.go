package rlqs

import (
	"context"
	"strings"
	"testing"

	rlqspb "github.com/envoyproxy/go-control-plane/envoy/service/rate_limit_quota/v3"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/mem"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/proto"

	"github.com/floodgate/floodgate/pkg/limit"
	"github.com/floodgate/floodgate/pkg/rules"
)

// rawCodec sends bytes as they are, under the name of gRPC's proto
// codec, so that the server decodes them as a report: the way to send a
// report that is not one.
type rawCodec struct{}

func (rawCodec) Name() string { return "proto" }

func (rawCodec) Marshal(v any) (mem.BufferSlice, error) {
	return mem.BufferSlice{mem.SliceBuffer(*v.(*[]byte))}, nil
}

func (rawCodec) Unmarshal(data mem.BufferSlice, v any) error {
	return proto.Unmarshal(data.Materialize(), v.(proto.Message))
}

// TestMalformedReport: bytes that are not a report, or a report with a
// string that is not UTF-8, end the stream with the status gRPC gives a
// message its codec cannot decode (Internal, naming why), counted.
func TestMalformedReport(t *testing.T) {
	set := parseRules(t, tenantRules)
	h := serve(t, set, nil, Options{})
	for i, raw := range [][]byte{
		{0x0a, 0xff},       // domain: a length past the end
		{0x0a, 0x01, 0xff}, // domain: not UTF-8
		{0xff, 0xff, 0xff}, // not a tag
	} {
		desc := &rlqspb.RateLimitQuotaService_ServiceDesc.Streams[0]
		method := "/" + rlqspb.RateLimitQuotaService_ServiceDesc.ServiceName + "/" + desc.StreamName
		ctx, cancel := context.WithTimeout(context.Background(), wait)
		s, err := h.conn.NewStream(ctx, desc, method, grpc.ForceCodecV2(rawCodec{}))
		if err != nil {
			t.Fatal(err)
		}
		if err := s.SendMsg(&raw); err != nil {
			t.Fatal(err)
		}
		err = s.RecvMsg(&rlqspb.RateLimitQuotaResponse{})
		cancel()
		if status.Code(err) != codes.Internal || !strings.Contains(err.Error(), "failed to unmarshal") {
			t.Errorf("raw report %d (% x): the stream ended with %v, want Internal naming the decoding", i, raw, err)
		}
	}
	// Counted once the stream's goroutine has seen it end.
	h.waitMetric(t, 3, "refused", refusedMalformed)
	if n := h.metric(t, "refused", refusedMalformed); n != 3 {
		t.Errorf("refused malformed %v, want 3", n)
	}
}

// FuzzReport decodes arbitrary bytes as gRPC's proto codec does and, when
// they are a report, has a stream handle it twice: nothing panics, the
// buckets held stay within the bounds, and every action is for a bucket
// the stream holds or abandons, with a bucket_id.
func FuzzReport(f *testing.F) {
	for _, m := range []*rlqspb.RateLimitQuotaUsageReports{
		{Domain: "quota", BucketQuotaUsages: []*rlqspb.RateLimitQuotaUsageReports_BucketQuotaUsage{
			{BucketId: &rlqspb.BucketId{Bucket: tenant("acme")}, NumRequestsAllowed: 3, NumRequestsDenied: 1},
			{BucketId: &rlqspb.BucketId{Bucket: map[string]string{"a": "x", "b": "y"}}, NumRequestsAllowed: 1 << 62},
			{BucketId: &rlqspb.BucketId{}},
		}},
		{Domain: "quota"},
		{Domain: "elsewhere", BucketQuotaUsages: []*rlqspb.RateLimitQuotaUsageReports_BucketQuotaUsage{{}}},
	} {
		b, err := proto.Marshal(m)
		if err != nil {
			f.Fatal(err)
		}
		f.Add(b)
	}
	f.Add([]byte{0x0a, 0xff})
	set := parseRules(f, tenantRules)
	const bound = 4
	f.Fuzz(func(t *testing.T, raw []byte) {
		var m rlqspb.RateLimitQuotaUsageReports
		if proto.Unmarshal(raw, &m) != nil {
			return
		}
		svc, err := New(func() *rules.Set { return set }, limit.NewMemory(limit.MemoryOptions{MaxEntries: 64}),
			Options{MaxBuckets: bound, MaxStreamBuckets: bound, MaxBucketIDBytes: 64, MaxBucketEntries: 4})
		if err != nil {
			t.Fatal(err)
		}
		st := svc.newStream(nil, "fuzz")
		for range 2 {
			if err := st.report(context.Background(), &m); err != nil {
				if c := status.Code(err); c != codes.InvalidArgument {
					t.Fatalf("report refused with %v, want InvalidArgument", err)
				}
				return
			}
			if len(st.buckets) > bound || svc.buckets.Load() != int64(len(st.buckets)) {
				t.Fatalf("%d buckets held, %d counted, bound %d", len(st.buckets), svc.buckets.Load(), bound)
			}
			for _, a := range st.actions {
				key, _, err := bucketID(a.GetBucketId(), 4, 64)
				if err != nil || st.buckets[key] == nil && a.GetAbandonAction() == nil {
					t.Fatalf("action for bucket %v, which the stream does not hold (%v)", a.GetBucketId(), err)
				}
			}
			st.actions = st.actions[:0]
		}
	})
}
