package server

import (
	corev3 "github.com/envoyproxy/go-control-plane/envoy/config/core/v3"
	pb "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"
	"google.golang.org/protobuf/encoding/protowire"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/durationpb"
)

// appendResponse appends r encoded as proto would encode it
// deterministically: the fields every answer has are written without
// reflection, the rare ones (dynamic metadata, quotas, raw header values)
// by proto. TestAppendResponse holds it to proto's bytes.
func appendResponse(b []byte, r *pb.RateLimitResponse) []byte {
	b = appendVarint(b, 1, uint64(r.OverallCode))
	for _, st := range r.Statuses {
		b = appendMessage(b, 2, func(b []byte) []byte { return appendStatus(b, st) })
	}
	for _, h := range r.ResponseHeadersToAdd {
		b = appendMessage(b, 3, func(b []byte) []byte { return appendHeader(b, h) })
	}
	for _, h := range r.RequestHeadersToAdd {
		b = appendMessage(b, 4, func(b []byte) []byte { return appendHeader(b, h) })
	}
	if len(r.RawBody) > 0 {
		b = protowire.AppendTag(b, 5, protowire.BytesType)
		b = protowire.AppendBytes(b, r.RawBody)
	}
	if r.DynamicMetadata != nil {
		b = appendMessage(b, 6, func(b []byte) []byte { return appendProto(b, r.DynamicMetadata) })
	}
	if r.Quota != nil {
		b = appendMessage(b, 7, func(b []byte) []byte { return appendProto(b, r.Quota) })
	}
	return b
}

func appendStatus(b []byte, st *pb.RateLimitResponse_DescriptorStatus) []byte {
	if st == nil {
		return b
	}
	b = appendVarint(b, 1, uint64(st.Code))
	if l := st.CurrentLimit; l != nil {
		b = appendMessage(b, 2, func(b []byte) []byte {
			b = appendVarint(b, 1, uint64(l.RequestsPerUnit))
			b = appendVarint(b, 2, uint64(l.Unit))
			b = appendString(b, 3, l.Name)
			if m := l.UnitMultiplier; m != nil {
				b = appendMessage(b, 4, func(b []byte) []byte { return appendVarint(b, 1, uint64(m.Value)) })
			}
			return b
		})
	}
	b = appendVarint(b, 3, uint64(st.LimitRemaining))
	if d := st.DurationUntilReset; d != nil {
		b = appendMessage(b, 4, func(b []byte) []byte { return appendDuration(b, d) })
	}
	if st.Quota != nil {
		b = appendMessage(b, 5, func(b []byte) []byte { return appendProto(b, st.Quota) })
	}
	return b
}

func appendHeader(b []byte, h *corev3.HeaderValue) []byte {
	if h == nil {
		return b
	}
	b = appendString(b, 1, h.Key)
	b = appendString(b, 2, h.Value)
	if len(h.RawValue) > 0 {
		b = protowire.AppendTag(b, 3, protowire.BytesType)
		b = protowire.AppendBytes(b, h.RawValue)
	}
	return b
}

func appendDuration(b []byte, d *durationpb.Duration) []byte {
	b = appendVarint(b, 1, uint64(d.Seconds))
	// int32 fields are sign-extended to 64 bits on the wire.
	return appendVarint(b, 2, uint64(int64(d.Nanos)))
}

// appendProto appends m's fields as proto encodes them, for the parts
// of an answer too rare to write by hand.
func appendProto(b []byte, m proto.Message) []byte {
	out, err := proto.MarshalOptions{Deterministic: true}.MarshalAppend(b, m)
	if err != nil {
		// The service builds these messages; proto refuses only
		// invalid UTF-8, which the service never puts there.
		panic("server: cannot encode an answer: " + err.Error())
	}
	return out
}

// appendVarint appends field num unless v is zero, as proto3 omits it.
func appendVarint(b []byte, num protowire.Number, v uint64) []byte {
	if v == 0 {
		return b
	}
	b = protowire.AppendTag(b, num, protowire.VarintType)
	return protowire.AppendVarint(b, v)
}

// appendString appends field num unless s is empty, as proto3 omits it.
func appendString(b []byte, num protowire.Number, s string) []byte {
	if s == "" {
		return b
	}
	b = protowire.AppendTag(b, num, protowire.BytesType)
	return protowire.AppendString(b, s)
}

// appendMessage appends field num holding the message body appends,
// whose length is known only once it is written: one byte is set aside
// for it, enough for most parts of an answer, and the body moves when its
// length needs more.
func appendMessage(b []byte, num protowire.Number, body func([]byte) []byte) []byte {
	b = protowire.AppendTag(b, num, protowire.BytesType)
	at := len(b)
	b = body(append(b, 0))
	n := len(b) - at - 1
	if n < 0x80 {
		b[at] = byte(n)
		return b
	}
	extra := protowire.SizeVarint(uint64(n)) - 1
	for range extra {
		b = append(b, 0)
	}
	copy(b[at+1+extra:], b[at+1:at+1+n])
	protowire.AppendVarint(b[:at], uint64(n))
	return b
}
