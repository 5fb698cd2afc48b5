package rules

import (
	"crypto/sha256"
	"encoding/hex"
	"strconv"
	"time"
	"unsafe"

	"github.com/floodgate/floodgate/pkg/limit"
)

// maxKeyValue is the longest request value written verbatim into a counter
// key; longer ones are replaced by their SHA-256.
const maxKeyValue = 64

// Counter keys are of three kinds, told apart by their first byte:
//
//	'r' a rule's limit: then the limit's identity (appendIdentity)
//	'o' an override of a descriptor that matched a rule with limits: then
//	    the identity of the rule's first limit, the window and algorithm
//	'd' an override of any other descriptor: then the domain, every entry,
//	    the window and algorithm
//
// Each encoding is injective, so no two counters share a key. Keys are
// stored state: changing them resets every counter on upgrade, which
// envoy's TestCounterKeysArePinned guards.
const (
	keyRule          = 'r'
	overrideOfRule   = 'o'
	overrideOfDomain = 'd'
)

// appendCounterKey appends the counter key of l, one of rd's limits, for a
// request of domain.
func appendCounterKey(dst []byte, domain string, rd *Resolved, l *Limit) []byte {
	if rd.Override {
		return appendOverrideKey(dst, domain, rd.Rule, rd.Entries, l.Spec)
	}
	return rd.Rule.appendIdentity(append(dst, keyRule), l, rd.Entries)
}

// appendIdentity appends the identity of the counter of r's limit l for a
// request with these entries: l.ID then, for each level where the counter
// depends on the request's value (key-only, or a wildcard without
// share_threshold), '|' and the value as appendKeyField writes it.
func (r *Rule) appendIdentity(dst []byte, l *Limit, entries []Entry) []byte {
	dst = append(dst, l.ID...)
	for i := range r.levels {
		if !r.levels[i].dynamic || i >= len(entries) {
			continue
		}
		dst = append(dst, '|')
		dst = appendKeyField(dst, entries[i].Value)
	}
	return dst
}

// appendOverrideKey appends the counter key of an override counted with
// spec. r is the rule the descriptor matched, or nil; a rule without
// limits counts as nil. With a rule, an override counts apart from the
// rule's counters, per request value where the rule's counter is; without
// one, per distinct descriptor, as the reference server counts. Both end
// with "|w" and the window in microseconds, "|a" and the algorithm number,
// which parse one way only from the end.
func appendOverrideKey(dst []byte, domain string, r *Rule, entries []Entry, spec limit.Spec) []byte {
	if r != nil && len(r.Limits) > 0 {
		dst = append(dst, overrideOfRule)
		dst = r.appendIdentity(dst, r.Limits[0], entries)
	} else {
		dst = append(dst, overrideOfDomain)
		dst = appendKeyField(dst, domain)
		for _, e := range entries {
			dst = appendKeyField(dst, e.Key)
			dst = appendKeyField(dst, e.Value)
		}
	}
	dst = append(dst, "|w"...)
	dst = strconv.AppendInt(dst, spec.WindowMicros(), 10)
	dst = append(dst, "|a"...)
	return strconv.AppendUint(dst, uint64(spec.Algorithm), 10)
}

// DemandKey returns the key of the counter where RLQS adds up the demand a
// fleet sends for the counter at l.Key, over windows of window rounded up
// to whole seconds; "" for a window of 0. It is the key an override of one
// hit per window would have in the empty domain, on one entry with an
// empty key holding l.Key: no request can name that domain or key, so it
// is never the key of a rule or a request.
func (l *ResolvedLimit) DemandKey(window time.Duration) string {
	secs := uint32((window + time.Second - 1) / time.Second)
	if secs == 0 {
		return ""
	}
	spec := limit.Spec{Limit: 1, Window: time.Duration(secs) * time.Second}
	return string(appendOverrideKey(nil, "", nil, []Entry{{Value: l.Key}}, spec))
}

// appendKeyField appends s as 'v', its length, ':' and its bytes, or, past
// maxKeyValue bytes, as 'h' and its hex SHA-256, which bounds key size. A
// sequence of fields parses one way only.
func appendKeyField(dst []byte, s string) []byte {
	if len(s) > maxKeyValue {
		// Sum256 only reads the string's bytes: hashing them in place
		// spares the allocation of a conversion.
		sum := sha256.Sum256(unsafe.Slice(unsafe.StringData(s), len(s)))
		return hex.AppendEncode(append(dst, 'h'), sum[:])
	}
	dst = append(dst, 'v')
	dst = strconv.AppendInt(dst, int64(len(s)), 10)
	dst = append(dst, ':')
	return append(dst, s...)
}
