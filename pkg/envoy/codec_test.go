package envoy

import (
	"bytes"
	"context"
	"fmt"
	"net"
	"net/http/httptest"
	"slices"
	"strings"
	"sync"
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
	codec := new(Codec)
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
	codec := new(Codec)
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
	codec := new(Codec)
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
				if err := protoCodec.Unmarshal(req, &r); err != nil {
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
	}{{"encode_proto", protoCodec.Marshal}, {"encode_codec", codec.Marshal}} {
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

// TestCodecRefusals sends bytes over a real gRPC connection to a server
// of the Codec: a message that does not decode, holds a string that is
// not UTF-8 or is over the bound gets InvalidArgument naming the problem
// or ResourceExhausted, counted once under its reason; the service's own
// refusals (an empty key) are the service's, not counted by the codec;
// the server keeps serving.
func TestCodecRefusals(t *testing.T) {
	h := newHarness(t, Options{})
	codec := &Codec{MaxRequestBytes: 4 << 10}
	var mu sync.Mutex
	var refused []string
	conn := serveCodec(t, codec, h.svc, func(reason string) {
		mu.Lock()
		defer mu.Unlock()
		refused = append(refused, reason)
	})
	method := "/" + pb.RateLimitService_ServiceDesc.ServiceName + "/ShouldRateLimit"
	for _, tc := range []struct {
		name   string
		req    []byte
		code   codes.Code
		want   string
		reason string // the codec's refusal, "" for none
	}{
		{"valid", encode("test", []string{"user", "a"}), codes.OK, "", ""},
		{"invalid UTF-8 value", encode("test", []string{"user", "a"}, []string{"user", "ok", "k", "\xff"}), codes.InvalidArgument, "descriptors[1].entries[1].value: not valid UTF-8", refusedMalformed},
		{"invalid UTF-8 key", encode("test", []string{"us\xc3er", "a"}), codes.InvalidArgument, "descriptors[0].entries[0].key: not valid UTF-8", refusedMalformed},
		{"invalid UTF-8 domain", encode("t\xe2t", []string{"user", "a"}), codes.InvalidArgument, "domain: not valid UTF-8", refusedMalformed},
		// descriptors[1] has its own hits_addend, which only proto decodes.
		{"invalid UTF-8 after proto's fields", slices.Concat(encode("test", []string{"user", "a"}),
			[]byte{0x12, 0x04, 0x1a, 0x02, 0x08, 0x01}, encode("", []string{"k", "\xff"})[2:]),
			codes.InvalidArgument, "descriptors[2].entries[0].value: not valid UTF-8", refusedMalformed},
		{"not protobuf", []byte{0x0a, 0x7f, 't', 'e', 's', 't'}, codes.InvalidArgument, "invalid RateLimitRequest: ", refusedMalformed},
		{"truncated", []byte{0x0a, 0x03, 's', 0x12, 0x05, 0x0a}, codes.InvalidArgument, "invalid RateLimitRequest: ", refusedMalformed},
		{"too large", encode("test", []string{"user", strings.Repeat("x", 5<<10)}), codes.ResourceExhausted, "larger than max (5", refusedTooLarge},
		{"empty key: the service's", encode("test", []string{"", "a"}), codes.InvalidArgument, "descriptors[0].entries[0].key: must not be empty", ""},
		{"still serving after all that", encode("test", []string{"user", "b"}), codes.OK, "", ""},
	} {
		t.Run(tc.name, func(t *testing.T) {
			mu.Lock()
			refused = nil
			mu.Unlock()
			var out []byte
			err := conn.Invoke(context.Background(), method, &tc.req, &out, grpc.ForceCodec(rawCodec{}))
			if st := status.Convert(err); st.Code() != tc.code || !strings.Contains(st.Message(), tc.want) {
				t.Errorf("got %v, want %v containing %q", err, tc.code, tc.want)
			}
			mu.Lock()
			defer mu.Unlock()
			if want := []string{tc.reason}; tc.reason == "" && len(refused) > 0 || tc.reason != "" && (len(refused) != 1 || refused[0] != tc.reason) {
				t.Errorf("refused %q, want %q", refused, want)
			}
		})
	}
}

// serveCodec serves svc on loopback with codec, as a program embedding
// the service does, and returns a connection to it.
func serveCodec(t *testing.T, codec *Codec, svc pb.RateLimitServiceServer, refused func(string)) *grpc.ClientConn {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	s := grpc.NewServer(grpc.ForceServerCodecV2(codec))
	codec.Register(s, svc, refused)
	go s.Serve(l)
	t.Cleanup(s.Stop)
	conn, err := grpc.NewClient(l.Addr().String(), grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { conn.Close() })
	return conn
}

// TestJSONHandler: /json decodes a request in protojson and answers in
// it; a request refused is answered with its status, naming what is
// wrong after "invalid RateLimitRequest: " and without the protobuf
// module's "proto:" prefix, and counted once under its reason; VetJSON
// refuses what it refuses; the service's own refusals are not counted by
// the handler.
func TestJSONHandler(t *testing.T) {
	h := newHarness(t, Options{})
	codec := &Codec{MaxRequestBytes: 200, VetJSON: func(req *pb.RateLimitRequest) error {
		if req.HitsAddend > 5 {
			return fmt.Errorf("hits_addend: %d is too many here", req.HitsAddend)
		}
		return nil
	}}
	var refused []string
	handler := codec.JSONHandler(h.svc, func(reason string) { refused = append(refused, reason) })
	for _, tc := range []struct {
		name, method, body string
		code               int
		want, reason       string // reason: the handler's refusal, "" for none
	}{
		{"valid", "POST", `{"domain":"test","descriptors":[{"entries":[{"key":"user","value":"v"}]}],"hitsAddend":2}`, 200, `{"overallCode":"OK"`, ""},
		{"not a POST", "GET", "", 405, "POST a RateLimitRequest as JSON\n", refusedUnknownMethod},
		{"too large", "POST", `{"domain":"` + strings.Repeat("x", 200) + `"}`, 413, "reading the body: http: request body too large\n", refusedTooLarge},
		{"cut short", "POST", `{"domain":`, 400, "invalid RateLimitRequest: unexpected EOF\n", refusedMalformed},
		{"unknown field", "POST", `{"domain":"d","nope":1}`, 400, "invalid RateLimitRequest: (line 1:15): unknown field \"nope\"\n", refusedMalformed},
		{"not UTF-8", "POST", "{\"domain\":\"\xff\"}", 400, "invalid RateLimitRequest: ", refusedMalformed},
		{"vetted", "POST", `{"domain":"test","descriptors":[{"entries":[{"key":"user","value":"v"}]}],"hitsAddend":6}`, 400, "hits_addend: 6 is too many here\n", refusedMalformed},
		{"empty key: the service's", "POST", `{"domain":"test","descriptors":[{"entries":[{"value":"v"}]}]}`, 400, "descriptors[0].entries[0].key: must not be empty\n", ""},
	} {
		t.Run(tc.name, func(t *testing.T) {
			refused = nil
			w := httptest.NewRecorder()
			handler.ServeHTTP(w, httptest.NewRequest(tc.method, "/json", strings.NewReader(tc.body)))
			if body := w.Body.String(); w.Code != tc.code || !strings.HasPrefix(body, tc.want) || strings.Contains(body, "proto:") {
				t.Errorf("got %d %q, want %d starting with %q", w.Code, body, tc.code, tc.want)
			}
			if tc.reason == "" && len(refused) > 0 || tc.reason != "" && !slices.Equal(refused, []string{tc.reason}) {
				t.Errorf("refused %q, want %q", refused, tc.reason)
			}
		})
	}
}
