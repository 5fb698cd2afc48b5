package xds

import (
	"errors"
	"fmt"
	"strconv"

	rlsconf "github.com/envoyproxy/go-control-plane/ratelimit/config/ratelimit/v3"
	"google.golang.org/protobuf/encoding/protowire"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/anypb"
	"gopkg.in/yaml.v3"
)

// TypeURL is the xDS type of the resources the client subscribes to, the
// one envoyproxy/ratelimit and Envoy Gateway use.
const TypeURL = "type.googleapis.com/ratelimit.config.ratelimit.v3.RateLimitConfig"

// RuleFileField is the field number of RateLimitConfig that carries a whole
// floodgate rule file (YAML), with the extensions the proto lacks. The
// proto does not declare it: protobuf libraries and snapshot caches pass
// it on, envoyproxy/ratelimit ignores it, and one resource serves both.
const RuleFileField protowire.Number = 15001

// RuleFile returns a RateLimitConfig resource named name that carries the
// rule file yaml in RuleFileField. The result's Domain and Descriptors may
// be set for envoyproxy/ratelimit; floodgate then requires the rule file
// to declare the same domain.
func RuleFile(name string, yaml []byte) *rlsconf.RateLimitConfig {
	c := &rlsconf.RateLimitConfig{Name: name}
	b := protowire.AppendTag(nil, RuleFileField, protowire.BytesType)
	b = protowire.AppendBytes(b, yaml)
	c.ProtoReflect().SetUnknown(b)
	return c
}

// Files turns the resources of one xDS response into rule files named
// "xds/" and the resource's name: the rule file a resource carries in
// RuleFileField, else the YAML of its domain and descriptors. Its errors
// name the resource: of another type, not decoding, a name given twice, or
// a rule file whose domain differs from its resource's.
func Files(resources []*anypb.Any) (map[string][]byte, error) {
	files := make(map[string][]byte, len(resources))
	var errs []error
	for i, res := range resources {
		name, data, err := file(res)
		if name == "" {
			name = "resource[" + strconv.Itoa(i) + "]"
		}
		name = "xds/" + name
		switch {
		case err != nil:
			errs = append(errs, fmt.Errorf("%s: %w", name, err))
		case files[name] != nil:
			errs = append(errs, fmt.Errorf("%s: two resources have this name", name))
		default:
			files[name] = data
		}
	}
	if len(errs) > 0 {
		return nil, errors.Join(errs...)
	}
	return files, nil
}

// file decodes one resource into its name and rule file.
func file(res *anypb.Any) (string, []byte, error) {
	if res.GetTypeUrl() != TypeURL {
		return "", nil, fmt.Errorf("resource of type %q, want %s", res.GetTypeUrl(), TypeURL)
	}
	var c rlsconf.RateLimitConfig
	if err := proto.Unmarshal(res.GetValue(), &c); err != nil {
		return "", nil, fmt.Errorf("does not decode as a RateLimitConfig: %w", err)
	}
	data, found, err := ruleFile(c.ProtoReflect().GetUnknown())
	switch {
	case err != nil:
		return c.GetName(), nil, err
	case !found:
		data, err = yaml.Marshal(yamlConfig{Domain: c.GetDomain(), Descriptors: descriptorsYAML(c.GetDescriptors())})
		return c.GetName(), data, err
	}
	if c.GetDomain() != "" {
		var doc struct {
			Domain string `yaml:"domain"`
		}
		// The compiler reports a rule file that does not parse.
		if yaml.Unmarshal(data, &doc) == nil && doc.Domain != c.GetDomain() {
			return c.GetName(), nil, fmt.Errorf("the rule file's domain %q differs from the resource's %q", doc.Domain, c.GetDomain())
		}
	}
	return c.GetName(), data, nil
}

// ruleFile finds RuleFileField among a message's unknown fields; the last
// occurrence wins, as for any protobuf field that is not repeated.
func ruleFile(unknown []byte) (data []byte, found bool, err error) {
	for len(unknown) > 0 {
		num, typ, n := protowire.ConsumeField(unknown)
		if n < 0 {
			return nil, false, fmt.Errorf("unknown fields: %w", protowire.ParseError(n))
		}
		if num == RuleFileField && typ == protowire.BytesType {
			_, _, tag := protowire.ConsumeTag(unknown)
			data, _ = protowire.ConsumeBytes(unknown[tag:n])
			found = true
		}
		unknown = unknown[n:]
	}
	return data, found, nil
}

// The YAML of a rule file, for what RateLimitConfig holds; zero fields are
// omitted where the default means the same.
type (
	yamlConfig struct {
		Domain      string           `yaml:"domain"`
		Descriptors []yamlDescriptor `yaml:"descriptors,omitempty"`
	}
	yamlDescriptor struct {
		Key            string           `yaml:"key"`
		Value          string           `yaml:"value,omitempty"`
		RateLimit      *yamlPolicy      `yaml:"rate_limit,omitempty"`
		Descriptors    []yamlDescriptor `yaml:"descriptors,omitempty"`
		ShadowMode     bool             `yaml:"shadow_mode,omitempty"`
		DetailedMetric bool             `yaml:"detailed_metric,omitempty"`
		QuotaMode      bool             `yaml:"quota_mode,omitempty"`
		Metadata       map[string]any   `yaml:"metadata,omitempty"`
	}
	yamlPolicy struct {
		Unit            string        `yaml:"unit,omitempty"`
		RequestsPerUnit *uint32       `yaml:"requests_per_unit,omitempty"`
		Unlimited       bool          `yaml:"unlimited,omitempty"`
		Name            string        `yaml:"name,omitempty"`
		Replaces        []yamlReplace `yaml:"replaces,omitempty"`
	}
	yamlReplace struct {
		Name string `yaml:"name"`
	}
)

func descriptorsYAML(ds []*rlsconf.RateLimitDescriptor) []yamlDescriptor {
	if len(ds) == 0 {
		return nil
	}
	out := make([]yamlDescriptor, len(ds))
	for i, d := range ds {
		out[i] = yamlDescriptor{
			Key:            d.GetKey(),
			Value:          d.GetValue(),
			RateLimit:      policyYAML(d.GetRateLimit()),
			Descriptors:    descriptorsYAML(d.GetDescriptors()),
			ShadowMode:     d.GetShadowMode(),
			DetailedMetric: d.GetDetailedMetric(),
			QuotaMode:      d.GetQuotaMode(),
			// Struct's values are JSON's kinds, as the reference reads them.
			Metadata: d.GetMetadata().AsMap(),
		}
	}
	return out
}

func policyYAML(p *rlsconf.RateLimitPolicy) *yamlPolicy {
	if p == nil {
		return nil
	}
	y := &yamlPolicy{Unlimited: p.GetUnlimited(), Name: p.GetName()}
	if u := p.GetUnit(); u != rlsconf.RateLimitUnit_UNKNOWN {
		// An out-of-range number shows as itself and is refused as a unit.
		y.Unit = u.String()
	}
	if n := p.GetRequestsPerUnit(); n != 0 || !y.Unlimited {
		y.RequestsPerUnit = &n
	}
	for _, r := range p.GetReplaces() {
		y.Replaces = append(y.Replaces, yamlReplace{Name: r.GetName()})
	}
	return y
}
