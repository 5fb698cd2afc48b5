package server

import (
	"context"
	"strings"
	"testing"

	rlv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/common/ratelimit/v3"
	pb "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/wrapperspb"

	"github.com/floodgate/floodgate/internal/rlsmetrics"
	"github.com/floodgate/floodgate/pkg/envoy"
)

// TestBadRequestsOverGRPC: the gRPC listener decodes with envoy.Codec,
// holds requests to MaxMessageBytes, and counts every request refused,
// whether by the codec, the service or the listener (an unknown method),
// once under its reason; it keeps serving. The codec's own refusals are
// envoy's TestCodecRefusals.
func TestBadRequestsOverGRPC(t *testing.T) {
	s, _ := running(t, Options{MaxMessageBytes: 4 << 10})
	conn, err := grpc.NewClient(s.Addrs().GRPC.String(), grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	method := "/" + pb.RateLimitService_ServiceDesc.ServiceName + "/ShouldRateLimit"
	request := func(domain string, kvs ...string) *pb.RateLimitRequest {
		req := &pb.RateLimitRequest{Domain: domain}
		for i := 0; i+1 < len(kvs); i += 2 {
			req.Descriptors = append(req.Descriptors, &rlv3.RateLimitDescriptor{Entries: []*rlv3.RateLimitDescriptor_Entry{{Key: kvs[i], Value: kvs[i+1]}}})
		}
		return req
	}
	manyDescs := make([]string, 0, 2*(envoy.DefaultOptions().Bounds.MaxDescriptors+1))
	for range envoy.DefaultOptions().Bounds.MaxDescriptors + 1 {
		manyDescs = append(manyDescs, "user", "a")
	}
	tests := []struct {
		name   string
		method string // default: ShouldRateLimit
		req    proto.Message
		code   codes.Code
		want   string
		// reason is the floodgate_requests_refused_total label counted
		// once for the request; "" for none.
		reason string
	}{
		{"valid", "", request("srv", "user", "a"), codes.OK, "", ""},
		// Its bytes read as a RateLimitRequest whose domain is not UTF-8.
		{"not a RateLimitRequest", "", &wrapperspb.BytesValue{Value: []byte("s\xe2v")}, codes.InvalidArgument, "domain: not valid UTF-8", "malformed"},
		{"empty key", "", request("srv", "", "a"), codes.InvalidArgument, "descriptors[0].entries[0].key: must not be empty", "malformed"},
		{"beyond the bounds", "", request("srv", manyDescs...), codes.InvalidArgument, "more than the bound of 64 (max descriptors)", "bounds"},
		{"too large", "", request("srv", "user", strings.Repeat("x", 5<<10)), codes.ResourceExhausted, "", "too_large"},
		{"unknown method", "/" + pb.RateLimitService_ServiceDesc.ServiceName + "/Nope", request("srv", "user", "a"), codes.Unimplemented, "unknown method", "unknown_method"},
		{"unknown service", "/some.Service/Call", request("srv", "user", "a"), codes.Unimplemented, "unknown method", "unknown_method"},
		{"still serving after all that", "", request("srv", "user", "b"), codes.OK, "", ""},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			before := refusedCounts(t, s)
			m := method
			if tc.method != "" {
				m = tc.method
			}
			err := conn.Invoke(context.Background(), m, tc.req, new(pb.RateLimitResponse))
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
		{"beyond the bounds", "POST", `{"domain":"srv","descriptors":[{"entries":[{"key":"user","value":"` + strings.Repeat("x", envoy.DefaultOptions().Bounds.MaxValueBytes+1) + `"}]}]}`, 400, "max value bytes", "bounds"},
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
