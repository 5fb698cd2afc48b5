package envoy

import (
	"github.com/floodgate/floodgate/pkg/rules"
)

// Counter keys (limit.Hit.Key) come from package rules' two encoders. A
// configured limit's key is keyRule then rules.Rule.AppendCounterKey; an
// Envoy override's key is rules.AppendOverrideKey, which starts with 'o' or
// 'd'. The first byte tells the kinds apart, and each encoder is injective,
// so no two counters share a key.
const keyRule = 'r'

// appendRuleKey appends the counter key of limit l of rule r for a request
// descriptor with these entries.
func appendRuleKey(dst []byte, r *rules.Rule, l *rules.Limit, entries []rules.Entry) []byte {
	dst = append(dst, keyRule)
	return r.AppendCounterKey(dst, l, entries)
}
