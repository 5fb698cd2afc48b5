package server

import (
	"context"
	"fmt"
	"math"
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

// requestCodec is gRPC's proto codec, except for the messages that carry
// go-control-plane's generated encoders (Marshal) and for the
// RateLimitRequest of a ShouldRateLimit call, which the handler
// rlsDesc wraps hands it as a *wireRequest: it decodes that without
// reflection into reused storage when it can (wireRequest.decode), and
// with proto otherwise. gRPC answers
// a message its codec cannot decode with Internal, which tells Envoy that
// floodgate failed rather than that the request is bad; for such a request
// this codec reports success and records what is wrong in the
// wireRequest, and the handler answers InvalidArgument naming it, before
// the service sees the request.
type requestCodec struct {
	proto encoding.CodecV2
	// maxRequest bounds a RateLimitRequest, which gRPC's own bound may
	// not when it is raised for RLQS reports.
	maxRequest int
}

// newRequestCodec returns a codec holding RateLimitRequests to no bound
// but gRPC's; Server.New sets maxRequest.
func newRequestCodec() *requestCodec {
	return &requestCodec{proto: encoding.GetCodecV2("proto"), maxRequest: math.MaxInt}
}

func (c *requestCodec) Name() string { return c.proto.Name() }

// Marshal encodes a message that has go-control-plane's generated
// encoder (vtMarshaler: the RateLimitResponse, in a build with the
// vtprotobuf tag) with it, and anything else as proto. Either way every
// field of the message is written: the generated code is regenerated with
// the messages. An answer is far below the size from which gRPC pools
// buffers (mem.IsBelowBufferPoolingThreshold), so it gets a buffer of its
// own, as from gRPC's proto codec.
func (c *requestCodec) Marshal(v any) (mem.BufferSlice, error) {
	m, ok := v.(vtMarshaler)
	if !ok {
		return c.proto.Marshal(v)
	}
	b, err := m.MarshalVTStrict()
	if err != nil {
		return nil, fmt.Errorf("server: encoding %T: %w", v, err)
	}
	return mem.BufferSlice{mem.SliceBuffer(b)}, nil
}

// vtMarshaler is the encoder protoc-gen-go-vtproto generates, without
// reflection, for go-control-plane's messages (RateLimitResponse and what
// it holds). go-control-plane compiles it only with the vtprotobuf build
// tag, which the Makefile, the Dockerfile and the tests' builds set: a
// build without it (go run ./cmd/server) encodes answers as proto, the
// same bytes but for the order of map entries, at about two and a half
// times the cost (BenchmarkCodec). go-control-plane generates no decoder,
// hence wireRequest.
type vtMarshaler interface {
	MarshalVTStrict() ([]byte, error)
}

func (c *requestCodec) Unmarshal(data mem.BufferSlice, v any) error {
	w, ok := v.(*wireRequest)
	if !ok {
		return c.proto.Unmarshal(data, v)
	}
	if n := data.Len(); n > c.maxRequest {
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

// rlsDesc is the RateLimitService as generated, except that its
// ShouldRateLimit handler answers InvalidArgument for a request the codec
// could not decode, counts the requests refused before the service
// (malformed, too large) and those in flight. gRPC decodes a request
// before any interceptor runs and turns decoding failures into Internal or
// ResourceExhausted on its own; only the handler sees both. It decodes as
// the generated handler does, without a closure per call, into a pooled
// wireRequest; the server sets no interceptor.
func (s *Server) rlsDesc(codec *requestCodec) *grpc.ServiceDesc {
	desc := pb.RateLimitService_ServiceDesc
	desc.Methods = slices.Clone(desc.Methods)
	for i, m := range desc.Methods {
		if m.MethodName != "ShouldRateLimit" {
			continue
		}
		desc.Methods[i].Handler = func(srv any, ctx context.Context, dec func(any) error, _ grpc.UnaryServerInterceptor) (any, error) {
			s.inflight.Add(1)
			defer s.inflight.Add(-1)
			in := getWireRequest()
			// The service keeps no pointer into the request once it has
			// answered (the contract of wireRequest), so its storage
			// serves the next call.
			defer in.release()
			if err := dec(in); err != nil {
				if status.Code(err) == codes.ResourceExhausted {
					s.opts.Refused(RefusedTooLarge)
				}
				return nil, err
			}
			if in.tooLarge > 0 {
				// As gRPC answers a message over its own bound.
				s.opts.Refused(RefusedTooLarge)
				return nil, status.Errorf(codes.ResourceExhausted, "grpc: received message larger than max (%d vs. %d)", in.tooLarge, s.opts.MaxMessageBytes)
			}
			if in.refusal != "" {
				s.opts.Refused(RefusedMalformed)
				return nil, status.Error(codes.InvalidArgument, in.refusal)
			}
			return srv.(pb.RateLimitServiceServer).ShouldRateLimit(ctx, &in.req)
		}
	}
	return &desc
}

// invalidUTF8Field names the first string of an encoded RateLimitRequest
// that is not UTF-8, as envoy names fields: "domain",
// "descriptors[1].entries[0].value".
func invalidUTF8Field(b []byte) string {
	field := "a string field"
	walkStrings(b, func(path []int) bool {
		switch {
		case len(path) == 1 && path[0] == 1:
			field = "domain"
		case len(path) == 5 && path[0] == 2 && path[2] == 1:
			name := "key"
			if path[4] == 2 {
				name = "value"
			}
			field = fmt.Sprintf("descriptors[%d].entries[%d].%s", path[1], path[3], name)
		default:
			return false
		}
		return true
	}, nil)
	return field
}

// walkStrings calls found with the path of each length-delimited field of
// the request's string fields that is not UTF-8 (field numbers, with the
// index of repeated messages after theirs: [2, i, 1, j, 2] is
// descriptors[i].entries[j].value) until found returns true.
func walkStrings(b []byte, found func(path []int) bool, path []int) bool {
	counts := map[protowire.Number]int{}
	for len(b) > 0 {
		num, typ, n := protowire.ConsumeTag(b)
		if n < 0 {
			return false
		}
		b = b[n:]
		if typ != protowire.BytesType {
			n = protowire.ConsumeFieldValue(num, typ, b)
			if n < 0 {
				return false
			}
			b = b[n:]
			continue
		}
		v, n := protowire.ConsumeBytes(b)
		if n < 0 {
			return false
		}
		b = b[n:]
		here := append(path[:len(path):len(path)], int(num))
		switch {
		case len(path) == 0 && num == 2, len(path) == 2 && num == 1:
			// descriptors, entries: repeated messages
			i := counts[num]
			counts[num]++
			if walkStrings(v, found, append(here, i)) {
				return true
			}
		case !utf8.Valid(v) && found(here):
			return true
		}
	}
	return false
}
