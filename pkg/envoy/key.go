package envoy

import (
	"crypto/sha256"
	"encoding/hex"
	"strconv"

	"github.com/floodgate/floodgate/pkg/limit"
	"github.com/floodgate/floodgate/pkg/rules"
)

// Counter keys (limit.Hit.Key) come from three encoders. The first byte says
// which one wrote the rest, so keys of different kinds never collide, and
// each encoder is injective on its own, so no two counters share a key.
const (
	// keyRule: 'r' then Rule.AppendCounterKey, the counter of a configured
	// limit.
	keyRule = 'r'
	// keyRuleOverride: 'o', Rule.AppendCounterKey of the matched rule's first
	// limit, then the override's window suffix. Envoy's per-descriptor limit
	// override of a matched rule counts apart from the rule's own counter and
	// apart from every other override window.
	keyRuleOverride = 'o'
	// keyDomainOverride: 'd', the domain and every entry, then the window
	// suffix: an override for a descriptor that matches no rule (the domain
	// exists), counted per distinct descriptor as the reference server does.
	keyDomainOverride = 'd'
)

// maxVerbatim is the longest domain, key or value written as is into a
// domain-override key; longer ones are replaced by their SHA-256, as package
// rules does for its keys, to bound key size.
const maxVerbatim = 64

// appendRuleKey appends the counter key of limit l of rule r for a request
// descriptor with these entries.
func appendRuleKey(dst []byte, r *rules.Rule, l *rules.Limit, entries []rules.Entry) []byte {
	dst = append(dst, keyRule)
	return r.AppendCounterKey(dst, l, entries)
}

// appendOverrideKey appends the counter key of an override with spec for a
// request descriptor of domain with these entries. r is the rule the
// descriptor matched, or nil; a rule without limits counts as nil, since it
// has no limit identity to extend.
//
// The window suffix, "|w" and the window in microseconds then "|a" and the
// algorithm number, is parsed unambiguously from the end (two maximal digit
// runs after fixed markers), so appending it to an injective prefix keeps
// the whole injective.
func appendOverrideKey(dst []byte, domain string, r *rules.Rule, entries []rules.Entry, spec limit.Spec) []byte {
	if r != nil && len(r.Limits) > 0 {
		dst = append(dst, keyRuleOverride)
		dst = r.AppendCounterKey(dst, r.Limits[0], entries)
	} else {
		// Each field is 'v' + decimal length + ':' + bytes, or 'h' + 64 hex
		// digits of its SHA-256; the first byte and the length make the
		// sequence parse one way only.
		dst = append(dst, keyDomainOverride)
		dst = appendField(dst, domain)
		for _, e := range entries {
			dst = appendField(dst, e.Key)
			dst = appendField(dst, e.Value)
		}
	}
	dst = append(dst, "|w"...)
	dst = strconv.AppendInt(dst, spec.WindowMicros(), 10)
	dst = append(dst, "|a"...)
	return strconv.AppendUint(dst, uint64(spec.Algorithm), 10)
}

func appendField(dst []byte, s string) []byte {
	if len(s) > maxVerbatim {
		sum := sha256.Sum256([]byte(s))
		dst = append(dst, 'h')
		return hex.AppendEncode(dst, sum[:])
	}
	dst = append(dst, 'v')
	dst = strconv.AppendInt(dst, int64(len(s)), 10)
	dst = append(dst, ':')
	return append(dst, s...)
}
