package xdstest

import (
	"embed"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"path"
	"strings"
	"testing"

	rlsconf "github.com/envoyproxy/go-control-plane/ratelimit/config/ratelimit/v3"
	"google.golang.org/protobuf/encoding/protojson"
	"gopkg.in/yaml.v3"
)

// GatewayCommit is the envoyproxy/gateway commit whose translator test
// data testdata/envoygateway holds, unchanged.
const GatewayCommit = "d32f28294245e454d20f81d323d626a90e660c1e"

//go:embed testdata/envoygateway/*.yaml
var gatewayData embed.FS

// GatewayCase is one case of Envoy Gateway's xDS translator tests: the
// rate-limit configurations it pushes, and the routes that send
// descriptors to them.
type GatewayCase struct {
	// Name is the case's file name without ".yaml", such as
	// "multiple-domains".
	Name string
	// Docs are the YAML documents of the case's file, one RateLimitConfig
	// each, in file order: what xDS delivers as one resource each, and a
	// rule file each.
	Docs []string
	// Routes are the routes of the case, from its .routes.yaml file.
	Routes []GatewayRoute
}

// GatewayRoute is one route's rate limits, as the translator's test data
// writes them.
type GatewayRoute struct {
	Name string `yaml:"routeName"`
	// RateLimits holds, by domain, the route's rate_limits entries; each
	// sends one descriptor, whose entries its actions make.
	RateLimits map[string][]struct {
		Actions []GatewayAction `yaml:"actions"`
	} `yaml:"rateLimitsByDomain"`
}

// GatewayAction is one action of a rate_limits entry: Kind is the name of
// the route.RateLimit.Action oneof it sets (GenericKey, HeaderValueMatch,
// RequestHeaders, RemoteAddressMatch, ...), Fields that message's fields
// as the test data writes them (descriptor_key, descriptor_value, ...).
type GatewayAction struct {
	Kind   string
	Fields map[string]any
}

// UnmarshalYAML reads {ActionSpecifier: {Kind: {fields}}}.
func (a *GatewayAction) UnmarshalYAML(n *yaml.Node) error {
	var v struct {
		Spec map[string]map[string]any `yaml:"ActionSpecifier"`
	}
	if err := n.Decode(&v); err != nil {
		return err
	}
	if len(v.Spec) != 1 {
		return fmt.Errorf("line %d: want one action in ActionSpecifier, got %d", n.Line, len(v.Spec))
	}
	for kind, fields := range v.Spec {
		a.Kind, a.Fields = kind, fields
	}
	return nil
}

// GatewayCases returns every case of Envoy Gateway's rate-limit test data,
// by name.
func GatewayCases(t testing.TB) []GatewayCase {
	t.Helper()
	names, err := fs.Glob(gatewayData, "testdata/envoygateway/*.yaml")
	if err != nil {
		t.Fatal(err)
	}
	var cases []GatewayCase
	for _, name := range names {
		base := strings.TrimSuffix(path.Base(name), ".yaml")
		if strings.HasSuffix(base, ".routes") {
			continue
		}
		c := GatewayCase{Name: base, Docs: documents(readData(t, name))}
		dec := yaml.NewDecoder(strings.NewReader(readData(t, path.Join(path.Dir(name), base+".routes.yaml"))))
		for {
			var r GatewayRoute
			if err := dec.Decode(&r); err != nil {
				if errors.Is(err, io.EOF) {
					break
				}
				t.Fatalf("%s.routes.yaml: %v", base, err)
			}
			c.Routes = append(c.Routes, r)
		}
		cases = append(cases, c)
	}
	return cases
}

func readData(t testing.TB, name string) string {
	t.Helper()
	b, err := gatewayData.ReadFile(name)
	if err != nil {
		t.Fatal(err)
	}
	return string(b)
}

// documents splits a YAML stream at its "---" lines, keeping each
// document's text as written.
func documents(stream string) []string {
	var docs []string
	var cur strings.Builder
	flush := func() {
		if strings.TrimSpace(cur.String()) != "" {
			docs = append(docs, cur.String())
		}
		cur.Reset()
	}
	for line := range strings.Lines(stream) {
		if strings.TrimRight(line, "\r\n") == "---" {
			flush()
			continue
		}
		cur.WriteString(line)
	}
	flush()
	return docs
}

// Resource is the RateLimitConfig a document of the case is, as Envoy
// Gateway pushes it. The test data also writes value_to_metric and
// share_threshold, which no field of the resource carries: they must be
// false.
func (c GatewayCase) Resource(t testing.TB, doc int) *rlsconf.RateLimitConfig {
	t.Helper()
	var v map[string]any
	if err := yaml.Unmarshal([]byte(c.Docs[doc]), &v); err != nil {
		t.Fatalf("%s document %d: %v", c.Name, doc, err)
	}
	if err := dropUncarried(v); err != nil {
		t.Fatalf("%s document %d: %v", c.Name, doc, err)
	}
	b, err := json.Marshal(v)
	if err != nil {
		t.Fatal(err)
	}
	var cfg rlsconf.RateLimitConfig
	if err := protojson.Unmarshal(b, &cfg); err != nil {
		t.Fatalf("%s document %d as a RateLimitConfig: %v", c.Name, doc, err)
	}
	return &cfg
}

// dropUncarried removes, at every level of v, the fields RateLimitConfig
// has none for, failing on one that is not false.
func dropUncarried(v any) error {
	switch v := v.(type) {
	case map[string]any:
		for _, name := range []string{"value_to_metric", "share_threshold"} {
			if x, ok := v[name]; ok && x != false {
				return fmt.Errorf("%s: %v, which no field of RateLimitConfig carries", name, x)
			}
			delete(v, name)
		}
		for _, x := range v {
			if err := dropUncarried(x); err != nil {
				return err
			}
		}
	case []any:
		for _, x := range v {
			if err := dropUncarried(x); err != nil {
				return err
			}
		}
	}
	return nil
}
