package envoy

import (
	"fmt"
	"strconv"
	"strings"

	corev3 "github.com/envoyproxy/go-control-plane/envoy/config/core/v3"
)

// HeaderStyle chooses the rate-limit headers a Service adds to answers, for
// Envoy to put on the downstream response.
type HeaderStyle uint8

const (
	// HeadersOff, the zero value, adds no header.
	HeadersOff HeaderStyle = iota
	// HeadersReference adds the reference server's RateLimit-Limit,
	// RateLimit-Remaining and RateLimit-Reset (seconds), plus Retry-After
	// on OVER_LIMIT answers.
	HeadersReference
	// HeadersIETF adds draft-ietf-httpapi-ratelimit-headers' fields,
	// RateLimit-Policy (`"name";q=<limit>;w=<window s>`) and RateLimit
	// (`"name";r=<remaining>;t=<s to reset>`), plus Retry-After on
	// OVER_LIMIT answers.
	HeadersIETF
)

var headerStyleNames = [...]string{"off", "reference", "ietf"}

// String returns the style's name: "off", "reference" or "ietf".
func (h HeaderStyle) String() string {
	if int(h) < len(headerStyleNames) {
		return headerStyleNames[h]
	}
	return fmt.Sprintf("HeaderStyle(%d)", uint8(h))
}

// UnmarshalText reads a style's name, in any case.
func (h *HeaderStyle) UnmarshalText(b []byte) error {
	for i, n := range headerStyleNames {
		if strings.EqualFold(string(b), n) {
			*h = HeaderStyle(i)
			return nil
		}
	}
	return fmt.Errorf("unknown response header style %q (want off, reference or ietf)", b)
}

// MarshalText writes the style's name.
func (h HeaderStyle) MarshalText() ([]byte, error) { return []byte(h.String()), nil }

// Headers configures response headers. The zero value adds none.
type Headers struct {
	Style HeaderStyle
	// LimitName, RemainingName and ResetName name the HeadersReference
	// headers (the reference's LIMIT_LIMIT_HEADER, LIMIT_REMAINING_HEADER,
	// LIMIT_RESET_HEADER); empty means DefaultOptions'.
	LimitName, RemainingName, ResetName string
}

// build returns an answer's headers, describing top (none when its limit
// is nil); Retry-After, when over, is retry seconds, at least 1.
func (h Headers) build(top *report, over bool, retry int64) []*corev3.HeaderValue {
	if h.Style == HeadersOff {
		return nil
	}
	var out []*corev3.HeaderValue
	if lim := top.limit; lim != nil {
		rpu := strconv.FormatUint(uint64(lim.RequestsPerUnit), 10)
		remaining := strconv.FormatUint(uint64(top.remaining), 10)
		reset := strconv.FormatInt(top.reset, 10)
		if h.Style == HeadersReference {
			out = append(out,
				&corev3.HeaderValue{Key: h.LimitName, Value: rpu},
				&corev3.HeaderValue{Key: h.RemainingName, Value: remaining},
				&corev3.HeaderValue{Key: h.ResetName, Value: reset},
			)
		} else {
			name := sfString(lim.Name)
			window := strconv.FormatInt(ceilSeconds(lim.Spec.Window), 10)
			out = append(out,
				&corev3.HeaderValue{Key: "RateLimit-Policy", Value: name + ";q=" + rpu + ";w=" + window},
				&corev3.HeaderValue{Key: "RateLimit", Value: name + ";r=" + remaining + ";t=" + reset},
			)
		}
	}
	if over {
		out = append(out, &corev3.HeaderValue{Key: "Retry-After", Value: strconv.FormatInt(max(retry, 1), 10)})
	}
	return out
}

// sfString quotes a policy name as an RFC 8941 string, other bytes than
// printable ASCII as '_'; an empty name is "default".
func sfString(name string) string {
	if name == "" {
		name = "default"
	}
	var b strings.Builder
	b.WriteByte('"')
	for i := 0; i < len(name); i++ {
		c := name[i]
		switch {
		case c == '"' || c == '\\':
			b.WriteByte('\\')
			b.WriteByte(c)
		case c < 0x20 || c > 0x7e:
			b.WriteByte('_')
		default:
			b.WriteByte(c)
		}
	}
	b.WriteByte('"')
	return b.String()
}
