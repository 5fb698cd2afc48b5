package envoy

import (
	"cmp"
	"context"
	"fmt"
	"slices"
	"strings"
	"unicode/utf8"

	pb "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/encoding"
	"google.golang.org/grpc/mem"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/encoding/protowire"
	"google.golang.org/protobuf/proto"

	// Registers the "proto" codec this one wraps.
	_ "google.golang.org/grpc/encoding/proto"
)

// Codec is the gRPC codec of a RateLimitService server built with
// grpc.ForceServerCodecV2(c), on which c.Register registers the service.
// It decodes ShouldRateLimit's request without reflection into reused
// storage, and answers InvalidArgument, naming what is wrong, to a request
// it cannot decode, where gRPC would answer Internal (a server failure to
// Envoy). Other messages go through gRPC's proto codec. c.JSONHandler
// decodes the same request written in JSON. The zero value is ready to
// use; a Codec is safe for concurrent use.
type Codec struct {
	// MaxRequestBytes bounds a RateLimitRequest, answering
	// ResourceExhausted as gRPC does over grpc.MaxRecvMsgSize, which other
	// messages may need larger, and 413 on /json; 0 means no bound but
	// gRPC's, and none on /json.
	MaxRequestBytes int
	// VetJSON, when set, is asked about each request JSONHandler decodes,
	// before the service sees it: an error refuses the request, 400 with
	// the error's text, counted as malformed. A server that lets anyone
	// reach /json refuses limit overrides there so.
	VetJSON func(*pb.RateLimitRequest) error
}

// protoCodec is gRPC's proto codec, registered by the import above.
var protoCodec = encoding.GetCodecV2("proto")

// Name is "proto", the codec gRPC clients ask for.
func (c *Codec) Name() string { return protoCodec.Name() }

// Marshal encodes a message with go-control-plane's generated encoder when
// the build has it (vtMarshaler), else as proto. An answer is below the
// size from which gRPC pools buffers, so it gets a buffer of its own.
func (c *Codec) Marshal(v any) (mem.BufferSlice, error) {
	m, ok := v.(vtMarshaler)
	if !ok {
		return protoCodec.Marshal(v)
	}
	b, err := m.MarshalVTStrict()
	if err != nil {
		return nil, fmt.Errorf("envoy: encoding %T: %w", v, err)
	}
	return mem.BufferSlice{mem.SliceBuffer(b)}, nil
}

// vtMarshaler is the encoder without reflection that go-control-plane
// compiles with the vtprotobuf build tag (set by the Makefile, the
// Dockerfile and the tests). Without it answers are encoded as proto, the
// same bytes but for the order of map entries. There is no generated
// decoder, hence wireRequest.
type vtMarshaler interface {
	MarshalVTStrict() ([]byte, error)
}

// Unmarshal decodes a ShouldRateLimit request into the *wireRequest
// Register's handler passes, and anything else as proto. A request too
// large or that does not decode is recorded there for the handler to
// answer and count, not returned as an error.
func (c *Codec) Unmarshal(data mem.BufferSlice, v any) error {
	w, ok := v.(*wireRequest)
	if !ok {
		return protoCodec.Unmarshal(data, v)
	}
	if n := data.Len(); c.MaxRequestBytes > 0 && n > c.MaxRequestBytes {
		w.tooLarge = n
		return nil
	}
	var b []byte
	if len(data) == 1 {
		b = data[0].ReadOnlyData()
	} else {
		b = data.Materialize()
	}
	if w.decode(b) {
		return nil
	}
	w.reset()
	err := proto.Unmarshal(b, &w.req)
	if err == nil {
		return nil
	}
	w.refusal = "invalid RateLimitRequest: " + protoErrorText(err)
	if strings.Contains(err.Error(), "UTF-8") {
		w.refusal = invalidUTF8Field(b) + ": not valid UTF-8"
	}
	return nil
}

// Register registers svc on s, a server built with
// grpc.ForceServerCodecV2(c), as RegisterRateLimitServiceServer does, with
// a ShouldRateLimit handler that decodes with c into a pooled request.
// refused, when not nil, is called with the reason, "malformed" or
// "too_large", for each request the handler refuses (Metrics.Refused). The handler calls
// no interceptor: gRPC decodes before interceptors run.
func (c *Codec) Register(s grpc.ServiceRegistrar, svc pb.RateLimitServiceServer, refused func(reason string)) {
	if refused == nil {
		refused = func(string) {}
	}
	desc := pb.RateLimitService_ServiceDesc
	desc.Methods = slices.Clone(desc.Methods)
	for i, m := range desc.Methods {
		if m.MethodName == "ShouldRateLimit" {
			desc.Methods[i].Handler = c.handler(refused)
		}
	}
	s.RegisterService(&desc, svc)
}

// handler is the generated handler, without a closure per call.
func (c *Codec) handler(refused func(string)) grpc.MethodHandler {
	return func(srv any, ctx context.Context, dec func(any) error, _ grpc.UnaryServerInterceptor) (any, error) {
		in := getWireRequest()
		defer in.release()
		if err := dec(in); err != nil {
			if status.Code(err) == codes.ResourceExhausted {
				refused(refusedTooLarge)
			}
			return nil, err
		}
		if in.tooLarge > 0 {
			refused(refusedTooLarge)
			return nil, status.Errorf(codes.ResourceExhausted, "grpc: received message larger than max (%d vs. %d)", in.tooLarge, c.MaxRequestBytes)
		}
		if in.refusal != "" {
			refused(refusedMalformed)
			return nil, status.Error(codes.InvalidArgument, in.refusal)
		}
		return srv.(pb.RateLimitServiceServer).ShouldRateLimit(ctx, &in.req)
	}
}

// protoErrorText is a protobuf error's message without its "proto: "
// prefix, whose space some builds make a no-break space.
func protoErrorText(err error) string {
	msg := err.Error()
	for _, p := range []string{"proto: ", "proto:\u00a0"} {
		if m, ok := strings.CutPrefix(msg, p); ok {
			return m
		}
	}
	return msg
}

// invalidUTF8Field names the first string of an encoded RateLimitRequest
// that is not UTF-8, as envoy names fields: "domain",
// "descriptors[1].entries[0].value".
func invalidUTF8Field(b []byte) string {
	field, descriptor := "", 0
	walk(b, func(num protowire.Number, typ protowire.Type, at, end int, _ uint64) bool {
		switch {
		case typ != protowire.BytesType:
		case num == 1 && !utf8.Valid(b[at:end]):
			field = "domain"
		case num == 2:
			if f := invalidUTF8Entry(b[at:end]); f != "" {
				field = fmt.Sprintf("descriptors[%d].%s", descriptor, f)
			}
			descriptor++
		}
		return field == ""
	})
	return cmp.Or(field, "a string field")
}

// invalidUTF8Entry names the first string of an encoded descriptor's
// entries that is not UTF-8, "entries[0].value", or returns "".
func invalidUTF8Entry(b []byte) string {
	field, entry := "", 0
	walk(b, func(num protowire.Number, typ protowire.Type, at, end int, _ uint64) bool {
		if num != 1 || typ != protowire.BytesType {
			return true
		}
		e := b[at:end]
		walk(e, func(num protowire.Number, typ protowire.Type, at, end int, _ uint64) bool {
			if typ == protowire.BytesType && (num == 1 || num == 2) && !utf8.Valid(e[at:end]) {
				field = fmt.Sprintf("entries[%d].%s", entry, [...]string{1: "key", 2: "value"}[num])
			}
			return field == ""
		})
		entry++
		return field == ""
	})
	return field
}
