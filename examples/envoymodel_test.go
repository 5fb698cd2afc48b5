package examples_test

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/netip"
	"regexp"
	"strings"
	"sync"
	"testing"
	"time"

	bootstrapv3 "github.com/envoyproxy/go-control-plane/envoy/config/bootstrap/v3"
	routev3 "github.com/envoyproxy/go-control-plane/envoy/config/route/v3"
	rlcommonv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/common/ratelimit/v3"
	ratelimitv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/filters/http/ratelimit/v3"
	setmetadatav3 "github.com/envoyproxy/go-control-plane/envoy/extensions/filters/http/set_metadata/v3"
	hcmv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/filters/network/http_connection_manager/v3"
	netratelimitv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/filters/network/ratelimit/v3"
	rlsv3 "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"
	matcherv3 "github.com/envoyproxy/go-control-plane/envoy/type/matcher/v3"
	metadatav3 "github.com/envoyproxy/go-control-plane/envoy/type/metadata/v3"
	typev3 "github.com/envoyproxy/go-control-plane/envoy/type/v3"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/protobuf/types/known/anypb"
	"google.golang.org/protobuf/types/known/structpb"
)

// This file models the part of Envoy floodgate depends on, from Envoy's
// documentation and source: which route a request takes, the client address
// the connection manager derives, what each route rate_limits action puts in
// a descriptor, and what Envoy does with floodgate's answer. Anything the
// examples might use that is not modelled is an error, never a silent guess.

const (
	httpRateLimitFilter    = "envoy.filters.http.ratelimit"
	httpSetMetadataFilter  = "envoy.filters.http.set_metadata"
	httpRouterFilter       = "envoy.filters.http.router"
	hcmFilter              = "envoy.filters.network.http_connection_manager"
	networkRateLimitFilter = "envoy.filters.network.ratelimit"
	tcpProxyFilter         = "envoy.filters.network.tcp_proxy"
)

// request is an HTTP request as Envoy's filters see it.
type request struct {
	method, path string
	// headers are keyed by lower-case name.
	headers map[string][]string
	// peer is the address of the TCP peer.
	peer netip.Addr
}

// newRequest builds a request from a method, a path and "name: value"
// header lines.
func newRequest(method, path, peer string, headers ...string) request {
	r := request{method: method, path: path, headers: map[string][]string{}, peer: netip.MustParseAddr(peer)}
	for _, h := range headers {
		name, value, _ := strings.Cut(h, ":")
		name = strings.ToLower(strings.TrimSpace(name))
		r.headers[name] = append(r.headers[name], strings.TrimSpace(value))
	}
	return r
}

// header returns the values of a header, pseudo-headers included.
func (r request) header(name string) []string {
	switch name {
	case ":method":
		return []string{r.method}
	case ":path":
		return []string{r.path}
	case ":authority":
		if v := r.headers["host"]; len(v) > 0 {
			return v
		}
		return []string{"localhost"}
	case ":scheme":
		return []string{"http"}
	}
	return r.headers[name]
}

// pathOnly is the :path without query string and fragment.
func (r request) pathOnly() string {
	p, _, _ := strings.Cut(r.path, "?")
	p, _, _ = strings.Cut(p, "#")
	return p
}

// produced is one descriptor and the rate_limits entry that made it.
type produced struct {
	desc   *rlcommonv3.RateLimitDescriptor
	policy *routev3.RateLimit
}

// httpModel is one Envoy HTTP listener: its connection manager, routes and
// ratelimit filter.
type httpModel struct {
	hcm        *hcmv3.HttpConnectionManager
	filterName string
	filter     *ratelimitv3.RateLimit
	// metadata is the dynamic metadata set before the ratelimit filter runs,
	// by namespace.
	metadata map[string]*structpb.Struct
}

// newHTTPModel models the listener on port of b.
func newHTTPModel(b *bootstrapv3.Bootstrap, port uint32) (*httpModel, error) {
	l, err := listenerOnPort(b, port)
	if err != nil {
		return nil, err
	}
	hcm, err := networkFilter[*hcmv3.HttpConnectionManager](l, hcmFilter)
	if err != nil {
		return nil, err
	}
	return newHTTPModelFromHCM(hcm)
}

func newHTTPModelFromHCM(hcm *hcmv3.HttpConnectionManager) (*httpModel, error) {
	if hcm.GetRouteConfig() == nil {
		return nil, errors.New("the model needs an inline route_config")
	}
	m := &httpModel{hcm: hcm, metadata: map[string]*structpb.Struct{}}
	filters := hcm.GetHttpFilters()
	for i, f := range filters {
		switch f.GetName() {
		case httpSetMetadataFilter:
			if m.filter != nil {
				continue // runs after the ratelimit filter: irrelevant to it
			}
			cfg, err := unpack[*setmetadatav3.Config](f.GetTypedConfig())
			if err != nil {
				return nil, err
			}
			if err := m.setMetadata(cfg); err != nil {
				return nil, err
			}
		case httpRateLimitFilter:
			if m.filter != nil {
				return nil, errors.New("two ratelimit filters: the model handles one")
			}
			cfg, err := unpack[*ratelimitv3.RateLimit](f.GetTypedConfig())
			if err != nil {
				return nil, err
			}
			m.filter, m.filterName = cfg, f.GetName()
		case httpRouterFilter:
			if i != len(filters)-1 {
				return nil, fmt.Errorf("the router filter is at position %d of %d: filters after it never run", i+1, len(filters))
			}
		default:
			if m.filter == nil {
				return nil, fmt.Errorf("http filter %q runs before the ratelimit filter and is not modelled", f.GetName())
			}
		}
	}
	if m.filter == nil {
		return nil, errors.New("no " + httpRateLimitFilter + " filter")
	}
	if filters[len(filters)-1].GetName() != httpRouterFilter {
		return nil, errors.New("the last http filter is not the router")
	}
	f := m.filter
	switch {
	case len(f.GetRateLimits()) > 0:
		return nil, errors.New("the filter's own rate_limits are not modelled")
	case f.GetRequestType() != "" && f.GetRequestType() != "both":
		return nil, fmt.Errorf("request_type %q is not modelled", f.GetRequestType())
	case f.GetFilterEnabled() != nil || f.GetFilterEnforced() != nil:
		return nil, errors.New("filter_enabled/filter_enforced are not modelled")
	}
	return m, nil
}

// setMetadata applies a set_metadata filter.
func (m *httpModel) setMetadata(cfg *setmetadatav3.Config) error {
	if cfg.GetMetadataNamespace() != "" || cfg.GetValue() != nil {
		return errors.New("set_metadata: the deprecated metadata_namespace/value form is not modelled")
	}
	for _, md := range cfg.GetMetadata() {
		if md.GetTypedValue() != nil {
			return errors.New("set_metadata: typed_value is not modelled")
		}
		ns := md.GetMetadataNamespace()
		if _, ok := m.metadata[ns]; ok && !md.GetAllowOverwrite() {
			continue
		}
		m.metadata[ns] = md.GetValue()
	}
	return nil
}

// clientAddress is the downstream address the connection manager derives
// (the remote_address action's value): with use_remote_address and
// xff_num_trusted_hops N > 0, the N-th X-Forwarded-For address from the
// right when it parses, else the peer.
func (m *httpModel) clientAddress(r request) (netip.Addr, error) {
	if !m.hcm.GetUseRemoteAddress().GetValue() {
		return netip.Addr{}, errors.New("use_remote_address false is not modelled")
	}
	if len(m.hcm.GetOriginalIpDetectionExtensions()) > 0 {
		return netip.Addr{}, errors.New("original_ip_detection_extensions are not modelled")
	}
	hops := int(m.hcm.GetXffNumTrustedHops())
	xff := strings.Join(r.headers["x-forwarded-for"], ",")
	if hops == 0 || xff == "" {
		return r.peer, nil
	}
	parts := strings.Split(xff, ",")
	if len(parts) < hops {
		return r.peer, nil
	}
	if a, err := netip.ParseAddr(strings.TrimSpace(parts[len(parts)-hops])); err == nil {
		return a, nil
	}
	return r.peer, nil
}

// route returns the virtual host and route r takes, or nil when no route
// matches (Envoy answers 404 without calling floodgate).
func (m *httpModel) route(r request) (*routev3.VirtualHost, *routev3.Route, error) {
	host := "localhost"
	if h := r.header(":authority"); len(h) > 0 {
		host = h[0]
	}
	if h, _, err := net.SplitHostPort(host); err == nil {
		host = h
	}
	for _, vh := range m.hcm.GetRouteConfig().GetVirtualHosts() {
		ok, err := domainMatches(vh.GetDomains(), host)
		if err != nil {
			return nil, nil, err
		}
		if !ok {
			continue
		}
		for _, rt := range vh.GetRoutes() {
			ok, err := routeMatches(rt.GetMatch(), r)
			if err != nil {
				return nil, nil, fmt.Errorf("route %q: %w", rt.GetName(), err)
			}
			if ok {
				return vh, rt, nil
			}
		}
		return vh, nil, nil
	}
	return nil, nil, nil
}

func domainMatches(domains []string, host string) (bool, error) {
	for _, d := range domains {
		switch {
		case d == "*" || strings.EqualFold(d, host):
			return true, nil
		case strings.Contains(d, "*"):
			return false, fmt.Errorf("domain pattern %q is not modelled", d)
		}
	}
	return false, nil
}

func routeMatches(rm *routev3.RouteMatch, r request) (bool, error) {
	if rm.GetCaseSensitive() != nil && !rm.GetCaseSensitive().GetValue() {
		return false, errors.New("case_sensitive false is not modelled")
	}
	if len(rm.GetQueryParameters()) > 0 || rm.GetRuntimeFraction() != nil || rm.GetGrpc() != nil ||
		rm.GetTlsContext() != nil || len(rm.GetDynamicMetadata()) > 0 || rm.GetFilterState() != nil {
		return false, errors.New("route match conditions other than the path and headers are not modelled")
	}
	var ok bool
	switch ps := rm.GetPathSpecifier().(type) {
	case *routev3.RouteMatch_Prefix:
		ok = strings.HasPrefix(r.path, ps.Prefix)
	case *routev3.RouteMatch_Path:
		ok = r.pathOnly() == ps.Path
	case *routev3.RouteMatch_SafeRegex:
		re, err := fullRegexp(ps.SafeRegex.GetRegex())
		if err != nil {
			return false, err
		}
		ok = re.MatchString(r.pathOnly())
	default:
		return false, fmt.Errorf("path specifier %T is not modelled", ps)
	}
	if !ok {
		return false, nil
	}
	return headersMatch(rm.GetHeaders(), r)
}

// fullRegexp compiles an RE2 pattern that must match the whole input, as
// Envoy's safe_regex does.
func fullRegexp(pattern string) (*regexp.Regexp, error) {
	return regexp.Compile("^(?:" + pattern + ")$")
}

// headersMatch reports whether every matcher matches, as Envoy's
// HeaderUtility::matchHeaders.
func headersMatch(ms []*routev3.HeaderMatcher, r request) (bool, error) {
	for _, hm := range ms {
		ok, err := headerMatches(hm, r)
		if err != nil || !ok {
			return false, err
		}
	}
	return true, nil
}

func headerMatches(hm *routev3.HeaderMatcher, r request) (bool, error) {
	values := r.header(strings.ToLower(hm.GetName()))
	present := len(values) > 0
	if !present && hm.GetTreatMissingHeaderAsEmpty() {
		values, present = []string{""}, true
	}
	pm, isPresent := hm.GetHeaderMatchSpecifier().(*routev3.HeaderMatcher_PresentMatch)
	if !present {
		// A missing header matches only a presence test that expects it
		// missing (Envoy: invert_match flips present_match here too).
		if !isPresent {
			return false, nil
		}
		return pm.PresentMatch == hm.GetInvertMatch(), nil
	}
	value := strings.Join(values, ",")
	var match bool
	switch s := hm.GetHeaderMatchSpecifier().(type) {
	case *routev3.HeaderMatcher_PresentMatch:
		match = s.PresentMatch
	case *routev3.HeaderMatcher_StringMatch:
		var err error
		if match, err = stringMatches(s.StringMatch, value); err != nil {
			return false, err
		}
	default:
		return false, fmt.Errorf("header matcher %T is not modelled", s)
	}
	return match != hm.GetInvertMatch(), nil
}

func stringMatches(sm *matcherv3.StringMatcher, v string) (bool, error) {
	fold := func(s string) string {
		if sm.GetIgnoreCase() {
			return strings.ToLower(s)
		}
		return s
	}
	switch p := sm.GetMatchPattern().(type) {
	case *matcherv3.StringMatcher_Exact:
		return fold(v) == fold(p.Exact), nil
	case *matcherv3.StringMatcher_Prefix:
		return strings.HasPrefix(fold(v), fold(p.Prefix)), nil
	case *matcherv3.StringMatcher_Suffix:
		return strings.HasSuffix(fold(v), fold(p.Suffix)), nil
	case *matcherv3.StringMatcher_Contains:
		return strings.Contains(fold(v), fold(p.Contains)), nil
	case *matcherv3.StringMatcher_SafeRegex:
		re, err := fullRegexp(p.SafeRegex.GetRegex())
		if err != nil {
			return false, err
		}
		return re.MatchString(v), nil
	}
	return false, fmt.Errorf("string matcher %T is not modelled", sm.GetMatchPattern())
}

// perRoute returns the most specific RateLimitPerRoute for the route (route,
// then virtual host), or nil.
func (m *httpModel) perRoute(vh *routev3.VirtualHost, rt *routev3.Route) (*ratelimitv3.RateLimitPerRoute, error) {
	for _, cfgs := range []map[string]*anypb.Any{rt.GetTypedPerFilterConfig(), vh.GetTypedPerFilterConfig()} {
		if c := cfgs[m.filterName]; c != nil {
			pr, err := unpack[*ratelimitv3.RateLimitPerRoute](c)
			if err != nil {
				return nil, err
			}
			if len(pr.GetRateLimits()) > 0 || pr.GetDomain() != "" {
				return nil, errors.New("RateLimitPerRoute rate_limits and domain are not modelled")
			}
			return pr, nil
		}
	}
	return nil, nil
}

// policies returns the rate_limits entries that apply to a route, in the
// order Envoy evaluates them: the route's, then the virtual host's when
// the route includes them (include_vh_rate_limits, or vh_rate_limits
// INCLUDE), or when it has none of its own (OVERRIDE, the default).
func (m *httpModel) policies(vh *routev3.VirtualHost, rt *routev3.Route) ([]*routev3.RateLimit, error) {
	routeLimits := rt.GetRoute().GetRateLimits()
	opt := ratelimitv3.RateLimitPerRoute_OVERRIDE
	if rt.GetRoute().GetIncludeVhRateLimits().GetValue() {
		opt = ratelimitv3.RateLimitPerRoute_INCLUDE
	} else {
		pr, err := m.perRoute(vh, rt)
		if err != nil {
			return nil, err
		}
		if pr != nil {
			opt = pr.GetVhRateLimits()
		}
	}
	var out []*routev3.RateLimit
	stage := m.filter.GetStage()
	add := func(list []*routev3.RateLimit) {
		for _, p := range list {
			if p.GetStage().GetValue() == stage {
				out = append(out, p)
			}
		}
	}
	add(routeLimits)
	switch opt {
	case ratelimitv3.RateLimitPerRoute_INCLUDE:
		add(vh.GetRateLimits())
	case ratelimitv3.RateLimitPerRoute_OVERRIDE:
		if len(routeLimits) == 0 {
			add(vh.GetRateLimits())
		}
	}
	return out, nil
}

// descriptors returns what the ratelimit filter sends for r: the route it
// takes (nil: no route, no call) and the descriptors, in order.
func (m *httpModel) descriptors(r request) (*routev3.Route, []produced, error) {
	vh, rt, err := m.route(r)
	if err != nil || rt == nil {
		return nil, nil, err
	}
	if rt.GetRoute() == nil {
		return rt, nil, nil // redirects and direct responses do not rate limit
	}
	policies, err := m.policies(vh, rt)
	if err != nil {
		return nil, nil, err
	}
	var out []produced
	for _, p := range policies {
		d, ok, err := m.descriptor(p, r)
		if err != nil {
			return nil, nil, err
		}
		if ok {
			out = append(out, produced{desc: d, policy: p})
		}
	}
	return rt, out, nil
}

// descriptor applies one rate_limits entry's actions; ok is false when an
// action had nothing to add and the descriptor is dropped.
func (m *httpModel) descriptor(p *routev3.RateLimit, r request) (*rlcommonv3.RateLimitDescriptor, bool, error) {
	if p.GetDisableKey() != "" || p.GetHitsAddend() != nil || p.GetApplyOnStreamDone() {
		return nil, false, errors.New("disable_key, hits_addend and apply_on_stream_done are not modelled")
	}
	d := &rlcommonv3.RateLimitDescriptor{}
	for _, a := range p.GetActions() {
		e, ok, err := m.action(a, r)
		if err != nil || !ok {
			return nil, false, err
		}
		if e != nil {
			d.Entries = append(d.Entries, e)
		}
	}
	if len(d.Entries) == 0 {
		return nil, false, nil
	}
	if o := p.GetLimit(); o != nil {
		md := o.GetDynamicMetadata()
		if md == nil {
			return nil, false, fmt.Errorf("limit override %T is not modelled", o.GetOverrideSpecifier())
		}
		d.Limit = m.override(md.GetMetadataKey().GetKey(), md.GetMetadataKey().GetPath())
	}
	return d, true, nil
}

// override reads a limit override from dynamic metadata, as Envoy's
// DynamicMetadataRateLimitOverride: a struct with a number
// requests_per_unit and a unit name; nil when absent or malformed.
func (m *httpModel) override(namespace string, path []*metadatav3.MetadataKey_PathSegment) *rlcommonv3.RateLimitDescriptor_RateLimitOverride {
	s := m.metadata[namespace]
	if s == nil {
		return nil
	}
	v := structpb.NewStructValue(s)
	for _, seg := range path {
		if v.GetStructValue() == nil {
			return nil
		}
		if v = v.GetStructValue().GetFields()[seg.GetKey()]; v == nil {
			return nil
		}
	}
	fields := v.GetStructValue().GetFields()
	rpu, unit := fields["requests_per_unit"], fields["unit"]
	if rpu == nil || unit == nil {
		return nil
	}
	if _, ok := rpu.GetKind().(*structpb.Value_NumberValue); !ok {
		return nil
	}
	u, ok := typev3.RateLimitUnit_value[unit.GetStringValue()]
	if !ok {
		return nil
	}
	return &rlcommonv3.RateLimitDescriptor_RateLimitOverride{
		RequestsPerUnit: uint32(rpu.GetNumberValue()),
		Unit:            typev3.RateLimitUnit(u),
	}
}

// action returns the entry one action adds. ok is false when the
// descriptor must be dropped; a nil entry with ok adds nothing
// (skip_if_absent).
func (m *httpModel) action(a *routev3.RateLimit_Action, r request) (*rlcommonv3.RateLimitDescriptor_Entry, bool, error) {
	entry := func(k, v string) *rlcommonv3.RateLimitDescriptor_Entry {
		return &rlcommonv3.RateLimitDescriptor_Entry{Key: k, Value: v}
	}
	switch s := a.GetActionSpecifier().(type) {
	case *routev3.RateLimit_Action_RemoteAddress_:
		addr, err := m.clientAddress(r)
		if err != nil {
			return nil, false, err
		}
		return entry("remote_address", addr.String()), true, nil
	case *routev3.RateLimit_Action_RequestHeaders_:
		rh := s.RequestHeaders
		v := r.header(strings.ToLower(rh.GetHeaderName()))
		if len(v) == 0 {
			return nil, rh.GetSkipIfAbsent(), nil
		}
		return entry(rh.GetDescriptorKey(), v[0]), true, nil
	case *routev3.RateLimit_Action_GenericKey_:
		key := s.GenericKey.GetDescriptorKey()
		if key == "" {
			key = "generic_key"
		}
		return entry(key, s.GenericKey.GetDescriptorValue()), true, nil
	case *routev3.RateLimit_Action_HeaderValueMatch_:
		hv := s.HeaderValueMatch
		ok, err := headersMatch(hv.GetHeaders(), r)
		if err != nil {
			return nil, false, err
		}
		expect := hv.GetExpectMatch() == nil || hv.GetExpectMatch().GetValue()
		if ok != expect {
			return nil, false, nil
		}
		key := hv.GetDescriptorKey()
		if key == "" {
			key = "header_match"
		}
		return entry(key, hv.GetDescriptorValue()), true, nil
	}
	return nil, false, fmt.Errorf("rate limit action %T is not modelled", a.GetActionSpecifier())
}

// allPolicies lists every rate_limits entry of the route table with where
// it is, for coverage checks.
func (m *httpModel) allPolicies() map[*routev3.RateLimit]string {
	out := map[*routev3.RateLimit]string{}
	for _, vh := range m.hcm.GetRouteConfig().GetVirtualHosts() {
		for i, p := range vh.GetRateLimits() {
			out[p] = fmt.Sprintf("virtual host %q rate_limits[%d]", vh.GetName(), i)
		}
		for j, rt := range vh.GetRoutes() {
			for i, p := range rt.GetRoute().GetRateLimits() {
				out[p] = fmt.Sprintf("virtual host %q routes[%d] rate_limits[%d]", vh.GetName(), j, i)
			}
		}
	}
	return out
}

// tcpModel is one Envoy TCP listener with the network ratelimit filter.
type tcpModel struct {
	filter *netratelimitv3.RateLimit
}

func newTCPModel(b *bootstrapv3.Bootstrap, port uint32) (*tcpModel, error) {
	l, err := listenerOnPort(b, port)
	if err != nil {
		return nil, err
	}
	f, err := networkFilter[*netratelimitv3.RateLimit](l, networkRateLimitFilter)
	if err != nil {
		return nil, err
	}
	return &tcpModel{filter: f}, nil
}

// formatRE finds Envoy's access-log substitution operators.
var formatRE = regexp.MustCompile(`%[A-Z_]+(\([^)]*\))?%`)

// descriptors returns what the filter sends for a new connection from
// peer: its descriptors with substitution formats applied.
func (m *tcpModel) descriptors(peer netip.Addr) ([]*rlcommonv3.RateLimitDescriptor, error) {
	var out []*rlcommonv3.RateLimitDescriptor
	for _, d := range m.filter.GetDescriptors() {
		nd := &rlcommonv3.RateLimitDescriptor{Limit: d.GetLimit()}
		for _, e := range d.GetEntries() {
			var ferr error
			v := formatRE.ReplaceAllStringFunc(e.GetValue(), func(op string) string {
				switch op {
				case "%DOWNSTREAM_REMOTE_ADDRESS_WITHOUT_PORT%":
					return peer.String()
				}
				ferr = fmt.Errorf("substitution %s is not modelled", op)
				return op
			})
			if ferr != nil {
				return nil, ferr
			}
			nd.Entries = append(nd.Entries, &rlcommonv3.RateLimitDescriptor_Entry{Key: e.GetKey(), Value: v})
		}
		out = append(out, nd)
	}
	return out, nil
}

// rlsClient calls floodgate's RateLimitService.
type rlsClient struct {
	conn *grpc.ClientConn
	rls  rlsv3.RateLimitServiceClient
}

func dialRLS(t testing.TB, addr string) *rlsClient {
	t.Helper()
	conn, err := grpc.NewClient(addr, grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatalf("dialing floodgate at %s: %v", addr, err)
	}
	t.Cleanup(func() { conn.Close() })
	return &rlsClient{conn: conn, rls: rlsv3.NewRateLimitServiceClient(conn)}
}

// envoyDecision is what Envoy does after asking floodgate: pass the request
// on, or reject it (429 for HTTP, a closed connection for TCP).
type envoyDecision struct {
	reject bool
	// resp is floodgate's answer; nil when no call was made or it failed.
	resp *rlsv3.RateLimitResponse
	// err is the call's error, which Envoy answers by failure_mode_deny.
	err error
}

// ask sends descriptors to floodgate as Envoy does, with the filter's
// timeout (20 ms when unset) and failure policy.
func (c *rlsClient) ask(ctx context.Context, domain string, descs []*rlcommonv3.RateLimitDescriptor, timeout time.Duration, failureModeDeny bool) envoyDecision {
	if len(descs) == 0 {
		return envoyDecision{}
	}
	if timeout == 0 {
		timeout = 20 * time.Millisecond
	}
	ctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	resp, err := c.rls.ShouldRateLimit(ctx, &rlsv3.RateLimitRequest{Domain: domain, Descriptors: descs})
	if err != nil {
		return envoyDecision{reject: failureModeDeny, err: err}
	}
	return envoyDecision{reject: resp.GetOverallCode() == rlsv3.RateLimitResponse_OVER_LIMIT, resp: resp}
}

// envoyStandIn serves an httpModel on a local port: requests the model
// rejects get 429 as from Envoy, the others reach a backend answering 200.
// It lets the README's curl commands run against floodgate unchanged. It
// uses a generous RLS timeout instead of the filter's, since a loaded test
// machine is not the network Envoy's timeout is tuned for.
type envoyStandIn struct {
	Addr string
	errs chan error
}

func startHTTPStandIn(t testing.TB, m *httpModel, rls *rlsClient) *envoyStandIn {
	t.Helper()
	s := &envoyStandIn{errs: make(chan error, 16)}
	h := http.HandlerFunc(func(w http.ResponseWriter, hr *http.Request) {
		r := request{method: hr.Method, path: hr.RequestURI, headers: map[string][]string{}}
		for name, vs := range hr.Header {
			r.headers[strings.ToLower(name)] = vs
		}
		r.headers["host"] = []string{hr.Host}
		ap, err := netip.ParseAddrPort(hr.RemoteAddr)
		if err == nil {
			r.peer = ap.Addr()
		}
		rt, descs, err := m.descriptors(r)
		if err == nil && rt == nil {
			http.NotFound(w, hr)
			return
		}
		if err != nil {
			s.report(fmt.Errorf("%s %s: %w", hr.Method, hr.RequestURI, err))
			http.Error(w, err.Error(), http.StatusInternalServerError)
			return
		}
		list := make([]*rlcommonv3.RateLimitDescriptor, len(descs))
		for i, p := range descs {
			list[i] = p.desc
		}
		d := rls.ask(hr.Context(), m.filter.GetDomain(), list, standInTimeout, m.filter.GetFailureModeDeny())
		if d.err != nil {
			s.report(fmt.Errorf("%s %s: floodgate: %w", hr.Method, hr.RequestURI, d.err))
		}
		if d.reject {
			w.Header().Set("x-envoy-ratelimited", "true")
			w.WriteHeader(http.StatusTooManyRequests)
			return
		}
		io.WriteString(w, "backend\n")
	})
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	srv := &http.Server{Handler: h}
	go srv.Serve(l)
	t.Cleanup(func() { srv.Close() })
	s.Addr = l.Addr().String()
	return s
}

// standInTimeout bounds a stand-in's call to floodgate.
const standInTimeout = 5 * time.Second

func (s *envoyStandIn) report(err error) {
	select {
	case s.errs <- err:
	default:
	}
}

// check fails the test with the errors the stand-in met while serving.
func (s *envoyStandIn) check(t testing.TB) {
	t.Helper()
	for {
		select {
		case err := <-s.errs:
			t.Errorf("Envoy stand-in: %v", err)
		default:
			return
		}
	}
}

// startTCPStandIn serves a tcpModel: each new connection is checked with
// floodgate before any byte is proxied to a backend answering HTTP 200,
// and closed unanswered when rejected.
func startTCPStandIn(t testing.TB, m *tcpModel, rls *rlsClient) *envoyStandIn {
	t.Helper()
	s := &envoyStandIn{errs: make(chan error, 16)}
	backend, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	bsrv := &http.Server{Handler: http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
		io.WriteString(w, "backend\n")
	})}
	go bsrv.Serve(backend)
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	var wg sync.WaitGroup
	t.Cleanup(func() {
		l.Close()
		wg.Wait()
		bsrv.Close()
	})
	go func() {
		for {
			c, err := l.Accept()
			if err != nil {
				return
			}
			wg.Go(func() { s.proxy(c, backend.Addr().String(), m, rls) })
		}
	}()
	s.Addr = l.Addr().String()
	return s
}

func (s *envoyStandIn) proxy(c net.Conn, backend string, m *tcpModel, rls *rlsClient) {
	defer c.Close()
	peer := c.RemoteAddr().(*net.TCPAddr).AddrPort().Addr()
	descs, err := m.descriptors(peer)
	if err != nil {
		s.report(err)
		return
	}
	d := rls.ask(context.Background(), m.filter.GetDomain(), descs, standInTimeout, m.filter.GetFailureModeDeny())
	if d.err != nil {
		s.report(fmt.Errorf("floodgate: %w", d.err))
	}
	if d.reject {
		return
	}
	up, err := net.Dial("tcp", backend)
	if err != nil {
		s.report(err)
		return
	}
	defer up.Close()
	done := make(chan struct{})
	go func() {
		io.Copy(up, c)
		up.(*net.TCPConn).CloseWrite()
		close(done)
	}()
	io.Copy(c, up)
	c.(*net.TCPConn).CloseWrite()
	<-done
}
