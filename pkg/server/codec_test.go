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
	tests := []struct {
		name string
		req  []byte
		code codes.Code
		want string
	}{
		{"valid", encode("srv", []string{"user", "a"}), codes.OK, ""},
		{"invalid UTF-8 value", encode("srv", []string{"user", "a"}, []string{"user", "ok", "k", "\xff"}), codes.InvalidArgument, "descriptors[1].entries[1].value: not valid UTF-8"},
		{"invalid UTF-8 key", encode("srv", []string{"us\xc3er", "a"}), codes.InvalidArgument, "descriptors[0].entries[0].key: not valid UTF-8"},
		{"invalid UTF-8 domain", encode("s\xe2v", []string{"user", "a"}), codes.InvalidArgument, "domain: not valid UTF-8"},
		{"empty key", encode("srv", []string{"", "a"}), codes.InvalidArgument, "descriptors[0].entries[0].key: must not be empty"},
		{"too large", encode("srv", []string{"user", strings.Repeat("x", 5<<10)}), codes.ResourceExhausted, ""},
		{"still serving after all that", encode("srv", []string{"user", "b"}), codes.OK, ""},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			var out []byte
			err := conn.Invoke(context.Background(), method, &tc.req, &out, grpc.ForceCodec(rawCodec{}))
			if st := status.Convert(err); st.Code() != tc.code || !strings.Contains(st.Message(), tc.want) {
				t.Errorf("got %v, want %v containing %q", err, tc.code, tc.want)
			}
		})
	}
}

func TestBadRequestsOverJSON(t *testing.T) {
	s, _ := running(t, Options{MaxMessageBytes: 4 << 10})
	url := "http://" + s.Addrs().HTTP.String() + "/json"
	tests := []struct {
		name, body string
		code       int
		want       string
	}{
		{"invalid UTF-8", "{\"domain\":\"srv\",\"descriptors\":[{\"entries\":[{\"key\":\"user\",\"value\":\"\xff\"}]}]}", 400, "UTF-8"},
		{"empty key", `{"domain":"srv","descriptors":[{"entries":[{"key":"","value":"a"}]}]}`, 400, "descriptors[0].entries[0].key: must not be empty"},
		{"too large", `{"domain":"srv","descriptors":[{"entries":[{"key":"user","value":"` + strings.Repeat("x", 5<<10) + `"}]}]}`, 413, "too large"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			code, body := do(t, "POST", url, tc.body)
			if code != tc.code || !strings.Contains(body, tc.want) {
				t.Errorf("%d %q, want %d containing %q", code, body, tc.code, tc.want)
			}
		})
	}
}
