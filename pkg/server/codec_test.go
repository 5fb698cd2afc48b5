package server

import (
	"context"
	"strings"
	"testing"

	pb "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/encoding/protowire"

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
	for _, r := range envoy.RefusalReasons {
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
