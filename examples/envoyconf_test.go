package examples_test

import (
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"strings"

	bootstrapv3 "github.com/envoyproxy/go-control-plane/envoy/config/bootstrap/v3"
	clusterv3 "github.com/envoyproxy/go-control-plane/envoy/config/cluster/v3"
	listenerv3 "github.com/envoyproxy/go-control-plane/envoy/config/listener/v3"
	"google.golang.org/protobuf/encoding/protojson"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/reflect/protoreflect"
	"google.golang.org/protobuf/types/known/anypb"
	"gopkg.in/yaml.v3"

	// The typed_config types the examples use; protojson resolves an Any's
	// @type through the global registry these imports fill.
	_ "github.com/envoyproxy/go-control-plane/envoy/extensions/filters/http/ratelimit/v3"
	_ "github.com/envoyproxy/go-control-plane/envoy/extensions/filters/http/router/v3"
	_ "github.com/envoyproxy/go-control-plane/envoy/extensions/filters/http/set_metadata/v3"
	_ "github.com/envoyproxy/go-control-plane/envoy/extensions/filters/network/http_connection_manager/v3"
	_ "github.com/envoyproxy/go-control-plane/envoy/extensions/filters/network/ratelimit/v3"
	_ "github.com/envoyproxy/go-control-plane/envoy/extensions/filters/network/tcp_proxy/v3"
	_ "github.com/envoyproxy/go-control-plane/envoy/extensions/upstreams/http/v3"
)

// yamlToJSON converts one YAML document to JSON, the form protojson reads.
func yamlToJSON(data []byte) ([]byte, error) {
	var v any
	if err := yaml.Unmarshal(data, &v); err != nil {
		return nil, err
	}
	return json.Marshal(v)
}

// unmarshalYAML reads YAML into a proto message, rejecting unknown fields
// as Envoy does.
func unmarshalYAML(data []byte, m proto.Message) error {
	js, err := yamlToJSON(data)
	if err != nil {
		return err
	}
	return protojson.Unmarshal(js, m)
}

// loadBootstrap reads an Envoy config file and validates it whole: the
// Bootstrap and, recursively, every Any inside it.
func loadBootstrap(path string) (*bootstrapv3.Bootstrap, error) {
	data, err := os.ReadFile(path)
	if err != nil {
		return nil, err
	}
	var b bootstrapv3.Bootstrap
	if err := unmarshalYAML(data, &b); err != nil {
		return nil, fmt.Errorf("%s: %w", path, err)
	}
	if err := validateDeep(&b); err != nil {
		return nil, fmt.Errorf("%s: %w", path, err)
	}
	return &b, nil
}

// validator is what protoc-gen-validate generates on every message.
type validator interface{ ValidateAll() error }

// validateDeep runs the generated validation of m and of every message
// packed in an Any below it, which m's own ValidateAll does not look into.
// Errors name the field path.
func validateDeep(m proto.Message) error {
	var errs []error
	validateTree(m, string(m.ProtoReflect().Descriptor().Name()), &errs)
	return errors.Join(errs...)
}

func validateTree(m proto.Message, path string, errs *[]error) {
	name := m.ProtoReflect().Descriptor().FullName()
	v, ok := m.(validator)
	if !ok {
		*errs = append(*errs, fmt.Errorf("%s: %s has no validation", path, name))
		return
	}
	if err := v.ValidateAll(); err != nil {
		*errs = append(*errs, fmt.Errorf("%s (%s): %w", path, name, err))
	}
	walkAnys(m.ProtoReflect(), path, func(p string, a *anypb.Any) {
		inner, err := anypb.UnmarshalNew(a, proto.UnmarshalOptions{})
		if err != nil {
			*errs = append(*errs, fmt.Errorf("%s: %s: %w", p, a.GetTypeUrl(), err))
			return
		}
		validateTree(inner, p, errs)
	})
}

// walkAnys calls fn for every Any below m that is not inside another Any,
// with its field path.
func walkAnys(m protoreflect.Message, path string, fn func(string, *anypb.Any)) {
	m.Range(func(fd protoreflect.FieldDescriptor, v protoreflect.Value) bool {
		p := path + "." + string(fd.Name())
		switch {
		case fd.IsList():
			if fd.Message() == nil {
				break
			}
			l := v.List()
			for i := range l.Len() {
				visitMessage(l.Get(i).Message(), fmt.Sprintf("%s[%d]", p, i), fn)
			}
		case fd.IsMap():
			if fd.MapValue().Message() == nil {
				break
			}
			v.Map().Range(func(k protoreflect.MapKey, mv protoreflect.Value) bool {
				visitMessage(mv.Message(), fmt.Sprintf("%s[%q]", p, k.String()), fn)
				return true
			})
		case fd.Message() != nil:
			visitMessage(v.Message(), p, fn)
		}
		return true
	})
}

func visitMessage(m protoreflect.Message, path string, fn func(string, *anypb.Any)) {
	if m.Descriptor().FullName() != "google.protobuf.Any" {
		walkAnys(m, path, fn)
		return
	}
	a, ok := m.Interface().(*anypb.Any)
	if !ok {
		a = &anypb.Any{}
		proto.Merge(a, m.Interface())
	}
	fn(path, a)
}

// unpack returns the message in a, of type T.
func unpack[T proto.Message](a *anypb.Any) (T, error) {
	var zero T
	m, err := anypb.UnmarshalNew(a, proto.UnmarshalOptions{})
	if err != nil {
		return zero, err
	}
	t, ok := m.(T)
	if !ok {
		return zero, fmt.Errorf("%s is not a %T", a.GetTypeUrl(), zero)
	}
	return t, nil
}

// listenerOnPort returns the static listener bound to port.
func listenerOnPort(b *bootstrapv3.Bootstrap, port uint32) (*listenerv3.Listener, error) {
	for _, l := range b.GetStaticResources().GetListeners() {
		if l.GetAddress().GetSocketAddress().GetPortValue() == port {
			return l, nil
		}
	}
	return nil, fmt.Errorf("no listener on port %d", port)
}

// networkFilter returns the typed config of the only network filter named
// name in l, unpacked.
func networkFilter[T proto.Message](l *listenerv3.Listener, name string) (T, error) {
	var zero T
	var found []*anypb.Any
	for _, fc := range l.GetFilterChains() {
		for _, f := range fc.GetFilters() {
			if f.GetName() == name {
				found = append(found, f.GetTypedConfig())
			}
		}
	}
	if len(found) != 1 {
		return zero, fmt.Errorf("listener %s: want one %s filter, found %d", l.GetName(), name, len(found))
	}
	return unpack[T](found[0])
}

// cluster returns the static cluster named name.
func cluster(b *bootstrapv3.Bootstrap, name string) *clusterv3.Cluster {
	for _, c := range b.GetStaticResources().GetClusters() {
		if c.GetName() == name {
			return c
		}
	}
	return nil
}

// clusterNames lists the static clusters, for messages.
func clusterNames(b *bootstrapv3.Bootstrap) string {
	var names []string
	for _, c := range b.GetStaticResources().GetClusters() {
		names = append(names, c.GetName())
	}
	return strings.Join(names, ", ")
}
