package dropin

import (
	"fmt"

	"github.com/envoyproxy/go-control-plane/pkg/cache/types"
	rlsconf "github.com/envoyproxy/go-control-plane/ratelimit/config/ratelimit/v3"
)

// shopRules use every field of the reference's format that answers
// depend on. Windows are a minute or longer: play starts a scenario again
// when it crosses a minute boundary.
const shopRules = `domain: shop
descriptors:
  # Any value: each value counts apart.
  - key: client
    rate_limit: {unit: minute, requests_per_unit: 3}
  # An exact value wins over the key alone.
  - key: client
    value: vip
    rate_limit: {unit: hour, requests_per_unit: 5}
  # Exact values before wildcards, whatever the order in the file.
  - key: path
    value: /api/*
    rate_limit: {unit: minute, requests_per_unit: 2}
  - key: path
    value: /api/public
  # A limit applies at its depth only.
  - key: tier
    value: free
    descriptors:
      - key: user
        rate_limit: {unit: day, requests_per_unit: 2}
  - key: blocked
    rate_limit: {unit: minute, requests_per_unit: 0}
  - key: open
    rate_limit: {unlimited: true}
  - key: shadow
    shadow_mode: true
    rate_limit: {unit: minute, requests_per_unit: 1}
  - key: named
    rate_limit: {name: per_user, unit: minute, requests_per_unit: 4}
  - key: replacer
    rate_limit: {unit: minute, requests_per_unit: 10, replaces: [{name: per_user}]}
  - key: week
    rate_limit: {unit: week, requests_per_unit: 2}
  - key: month
    rate_limit: {unit: month, requests_per_unit: 2}
  - key: year
    rate_limit: {unit: year, requests_per_unit: 2}
  - key: stats
    value: doc/*
    detailed_metric: true
    rate_limit: {unit: minute, requests_per_unit: 2}
  - key: stats
    value: img/*
    share_threshold: true
    rate_limit: {unit: minute, requests_per_unit: 3}
  - key: stats
    value: v*
    value_to_metric: true
    rate_limit: {unit: minute, requests_per_unit: 1}
`

// edgeRules are the corners of matching.
const edgeRules = `domain: edges
descriptors:
  - key: any
    value: "*"
    rate_limit: {unit: minute, requests_per_unit: 2}
  - key: pre
    value: "a*"
    rate_limit: {unit: minute, requests_per_unit: 1}
  - key: pre
    value: "*"
    rate_limit: {unit: minute, requests_per_unit: 5}
  - key: pre
    rate_limit: {unit: minute, requests_per_unit: 7}
  - key: k
    rate_limit: {unit: minute, requests_per_unit: 2}
  - key: unl
    rate_limit: {unlimited: true, name: gone}
  - key: rep
    rate_limit: {unit: minute, requests_per_unit: 3, replaces: [{name: gone}]}
  - key: second
    rate_limit: {unit: second, requests_per_unit: 1000}
`

// deepRules have limits at two depths, and a rule with an empty value.
const deepRules = `domain: deep
descriptors:
  - key: org
    rate_limit: {unit: hour, requests_per_unit: 4}
    descriptors:
      - key: team
        rate_limit: {unit: minute, requests_per_unit: 2}
  - key: empty
    value: ""
    rate_limit: {unit: minute, requests_per_unit: 1}
`

// yamlCorners are what YAML lets a rule file say that the reference
// accepts: a value written as a number or a boolean, a missing
// requests_per_unit, anchors and aliases, a domain with dots and slashes.
const yamlCorners = `domain: "my.domain/x"
descriptors:
  - key: norpu
    rate_limit:
      unit: minute
  - key: num
    value: 123
    rate_limit: {unit: minute, requests_per_unit: 1}
  - key: boolval
    value: true
    rate_limit: {unit: minute, requests_per_unit: 1}
  - key: explicit
    rate_limit: {unit: minute, requests_per_unit: 2, unlimited: false}
  - key: anchor
    rate_limit: &lim {unit: minute, requests_per_unit: 2}
  - key: alias
    rate_limit: *lim
  - key: detailonly
    detailed_metric: true
  - key: emptydescs
    descriptors: []
`

// perSecondRules have a limit of each store with REDIS_PERSECOND.
const perSecondRules = `domain: ps
descriptors:
  - key: s
    rate_limit: {unit: second, requests_per_unit: 2}
  - key: m
    rate_limit: {unit: minute, requests_per_unit: 2}
`

// xdsRules are rules as Envoy Gateway pushes them: RateLimitConfig
// resources.
func xdsRules() []types.Resource {
	perMinute := func(n uint32) *rlsconf.RateLimitPolicy {
		return &rlsconf.RateLimitPolicy{Unit: rlsconf.RateLimitUnit_MINUTE, RequestsPerUnit: n}
	}
	named := perMinute(4)
	named.Name = "per_user"
	replacer := perMinute(10)
	replacer.Replaces = []*rlsconf.RateLimitReplace{{Name: "per_user"}}
	return []types.Resource{
		&rlsconf.RateLimitConfig{Name: "pushed", Domain: "pushed", Descriptors: []*rlsconf.RateLimitDescriptor{
			{Key: "client", RateLimit: perMinute(3)},
			{Key: "client", Value: "vip", RateLimit: &rlsconf.RateLimitPolicy{Unit: rlsconf.RateLimitUnit_HOUR, RequestsPerUnit: 5}},
			{Key: "path", Value: "/api/*", RateLimit: perMinute(2)},
			{Key: "tier", Value: "free", Descriptors: []*rlsconf.RateLimitDescriptor{{Key: "user", RateLimit: perMinute(2)}}},
			{Key: "shadow", ShadowMode: true, RateLimit: perMinute(1)},
			{Key: "named", RateLimit: named},
			{Key: "replacer", RateLimit: replacer},
			{Key: "open", RateLimit: &rlsconf.RateLimitPolicy{Unlimited: true}},
		}},
		&rlsconf.RateLimitConfig{Name: "other", Domain: "other", Descriptors: []*rlsconf.RateLimitDescriptor{
			{Key: "k", RateLimit: perMinute(1)},
		}},
	}
}

// reloadRules is rule file version of domain reload, with a limit of
// perMinute for client; only version 1 has a rule for path.
func reloadRules(version, perMinute int) string {
	text := fmt.Sprintf(`domain: reload
descriptors:
  - key: version
    value: "%d"
    rate_limit: {unit: hour, requests_per_unit: 100}
  - key: client
    rate_limit: {unit: minute, requests_per_unit: %d}
`, version, perMinute)
	if version == 1 {
		text += "  - key: path\n    rate_limit: {unit: minute, requests_per_unit: 1}\n"
	}
	return text
}

// oneRule is a rule file of domain with one limit of 1 a minute.
func oneRule(domain string) string { return oneRuleKey(domain, "k") }

// oneRuleKey is a rule file of domain with one limit of 1 a minute, for
// key.
func oneRuleKey(domain, key string) string {
	return "domain: " + domain + "\ndescriptors:\n  - key: " + key + "\n    rate_limit: {unit: minute, requests_per_unit: 1}\n"
}

// joinedRules are rules of domain d whose joined key_value strings meet.
const joinedRules = `domain: d
descriptors:
  - key: a
    value: x_b
    descriptors:
      - key: c
        value: v
        rate_limit: {unit: minute, requests_per_unit: 1}
  - key: a
    value: x
    descriptors:
      - key: b_c
        value: v
        rate_limit: {unit: minute, requests_per_unit: 1}
  - key: a_b
    rate_limit: {unit: minute, requests_per_unit: 1}
`

// quotaRules mix quotas and limits.
const quotaRules = `domain: quota
descriptors:
  - key: plan
    quota_mode: true
    rate_limit: {unit: minute, requests_per_unit: 1}
  - key: team
    quota_mode: true
    rate_limit: {unit: minute, requests_per_unit: 2}
  - key: burst
    rate_limit: {unit: minute, requests_per_unit: 1}
`

// usageRules are two budgets of usage charged after the fact, as Envoy
// charges usage at stream done: a look (a descriptor's hits_addend 0)
// before each request, and the charge of what it used (the descriptor's
// own hits_addend) when it ends.
const usageRules = `domain: llm
descriptors:
  - key: user
    rate_limit: {unit: hour, requests_per_unit: 1000}
  - key: org
    rate_limit: {unit: hour, requests_per_unit: 1500}
`
