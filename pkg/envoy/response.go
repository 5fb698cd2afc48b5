package envoy

import (
	"encoding/json"
	"maps"
	"math"
	"strings"
	"time"

	corev3 "github.com/envoyproxy/go-control-plane/envoy/config/core/v3"
	rlv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/common/ratelimit/v3"
	pb "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"
	"google.golang.org/protobuf/types/known/durationpb"
	"google.golang.org/protobuf/types/known/structpb"
	"google.golang.org/protobuf/types/known/wrapperspb"

	"github.com/floodgate/floodgate/pkg/limit"
	"github.com/floodgate/floodgate/pkg/rules"
)

// respond builds the answer from the descriptors' outcomes; over says the
// request is rejected (judge).
func (s *Service) respond(sc *scratch, req *pb.RateLimitRequest, over bool) *pb.RateLimitResponse {
	// One allocation for the response and a few statuses.
	var resp *pb.RateLimitResponse
	var parts []statusParts
	switch n := len(sc.descs); {
	case n == 1:
		a := new(singleAnswer)
		resp, parts = &a.resp, a.parts[:]
		resp.Statuses = a.statuses[:]
	case n <= inlineStatuses:
		a := new(inlineAnswer)
		resp, parts = &a.resp, a.parts[:n]
		resp.Statuses = a.statuses[:n:n]
	default:
		resp = &pb.RateLimitResponse{Statuses: make([]*pb.RateLimitResponse_DescriptorStatus, n)}
		parts = make([]statusParts, n)
	}
	resp.OverallCode = pb.RateLimitResponse_OK
	var top report  // the limit the headers describe (headline)
	var pinned bool // top is over a rate limit
	var retry int64 // seconds until every over-limit descriptor could pass
	for di := range sc.descs {
		r := newReport(&sc.descs[di], s.opts.Now)
		resp.Statuses[di] = r.status(&parts[di])
		if r.limit != nil {
			top, pinned = headline(top, pinned, r, sc.descs[di].quota)
		}
		if r.over {
			retry = max(retry, r.reset)
		}
	}
	if over && s.opts.ShadowMode {
		over = false
		s.opts.Metrics.GlobalShadow()
	}
	if over {
		resp.OverallCode = pb.RateLimitResponse_OVER_LIMIT
	}
	resp.ResponseHeadersToAdd = s.opts.Headers.build(&top, over, retry)
	if over && s.opts.OverLimitBody {
		resp.RawBody = overLimitBody(req.GetDomain(), retry)
		resp.ResponseHeadersToAdd = append(resp.ResponseHeadersToAdd,
			&corev3.HeaderValue{Key: "content-type", Value: "application/json"})
	}
	if s.opts.DynamicMetadata {
		resp.DynamicMetadata = requestMetadata(sc, req)
	}
	return resp
}

// headline returns the report the headers describe once r is seen after
// top, as the reference server picks it: the last descriptor over a rate
// limit (not a quota), else the first with the least remaining. pinned
// reports that top is over a rate limit.
func headline(top report, pinned bool, r report, quota bool) (report, bool) {
	switch {
	case r.over && !quota:
		return r, true
	case !pinned && (top.limit == nil || r.remaining < top.remaining):
		return r, false
	}
	return top, pinned
}

// report is what an answer says of one descriptor.
type report struct {
	code      pb.RateLimitResponse_Code
	over      bool         // code is OVER_LIMIT
	limit     *rules.Limit // current_limit; nil for none
	remaining uint32       // limit_remaining
	reset     int64        // duration_until_reset, in seconds; with limit only
}

// newReport is the report of a descriptor's outcome; one with only
// unlimited limits gets, as from the reference server, no current_limit
// and the largest limit_remaining.
func newReport(ds *descPlan, now func() time.Time) report {
	o := &ds.out
	r := report{code: o.code, over: o.code == pb.RateLimitResponse_OVER_LIMIT, limit: o.limit}
	switch {
	case o.limit == nil:
		if ds.unlimited {
			r.remaining = math.MaxUint32
		}
	case r.over:
		// As the reference server: nothing left, even when a smaller
		// hits_addend would still pass.
		r.remaining = 0
		r.reset = resetSeconds(&o.limit.Spec, o.decision, now)
	default:
		r.remaining = uint32(min(max(o.decision.Remaining, 0), math.MaxUint32))
		r.reset = resetSeconds(&o.limit.Spec, o.decision, now)
	}
	return r
}

// status fills p with the DescriptorStatus of r and returns it.
func (r *report) status(p *statusParts) *pb.RateLimitResponse_DescriptorStatus {
	st := &p.status
	st.Code = r.code
	st.LimitRemaining = r.remaining
	if r.limit == nil {
		return st
	}
	p.limit.Name = r.limit.Name
	p.limit.RequestsPerUnit = r.limit.RequestsPerUnit
	p.limit.Unit = pb.RateLimitResponse_RateLimit_Unit(r.limit.Unit) // numbered alike
	// As the reference server, which never sets it: absent means 1.
	if r.limit.UnitMultiplier > 1 {
		p.multiplier.Value = r.limit.UnitMultiplier
		p.limit.UnitMultiplier = &p.multiplier
	}
	st.CurrentLimit = &p.limit
	p.reset.Seconds = r.reset
	st.DurationUntilReset = &p.reset
	return st
}

// resetSeconds is a status's duration_until_reset, rounded up to whole
// seconds so that a client never comes back too early; for a denial, when
// the same request could pass. A limit of requests_per_unit 0 has no
// counter: as the reference server, it reports the time left in its
// window on Options.Now.
func resetSeconds(spec *limit.Spec, d *limit.Decision, now func() time.Time) int64 {
	reset := d.ResetAfter
	switch {
	case !d.Allowed && d.RetryAfter > 0:
		reset = d.RetryAfter
	case spec.Limit == 0 && spec.Window > 0:
		t := now()
		_, end := spec.WindowAt(t)
		reset = end.Sub(t)
	}
	return ceilSeconds(reset)
}

// inlineAnswer and singleAnswer are a response and its statuses, in one
// allocation.
type inlineAnswer struct {
	resp     pb.RateLimitResponse
	statuses [inlineStatuses]*pb.RateLimitResponse_DescriptorStatus
	parts    [inlineStatuses]statusParts
}

type singleAnswer struct {
	resp     pb.RateLimitResponse
	statuses [1]*pb.RateLimitResponse_DescriptorStatus
	parts    [1]statusParts
}

// inlineStatuses is how many statuses an answer holds inline.
const inlineStatuses = 3

// statusParts are the messages of one DescriptorStatus.
type statusParts struct {
	status     pb.RateLimitResponse_DescriptorStatus
	limit      pb.RateLimitResponse_RateLimit
	multiplier wrapperspb.UInt32Value
	reset      durationpb.Duration
}

// ceilSeconds rounds d up to whole seconds.
func ceilSeconds(d time.Duration) int64 {
	return int64((d + time.Second - 1) / time.Second)
}

// overLimitBody is the JSON body of a 429; retry is in seconds.
func overLimitBody(domain string, retry int64) []byte {
	b, _ := json.Marshal(struct {
		Code              string `json:"code"`
		Domain            string `json:"domain"`
		RetryAfterSeconds int64  `json:"retry_after_seconds"`
	}{"OVER_LIMIT", domain, max(retry, 1)})
	return b
}

// requestMetadata is what the reference server puts
// in dynamic_metadata with RESPONSE_DYNAMIC_METADATA: the request, and
// under "metadata" the rules' metadata of the descriptors not over their
// limit with a limit counted (not an override), merged in request order:
// the first value of a name wins, mappings under one name merge.
func requestMetadata(sc *scratch, req *pb.RateLimitRequest) *structpb.Struct {
	md := requestFields(req)
	var merged map[string]any
	for di := range sc.res.Descriptors {
		rd := &sc.res.Descriptors[di]
		r := rd.Rule
		if r == nil || r.Metadata == nil || rd.Override || sc.descs[di].out.code == pb.RateLimitResponse_OVER_LIMIT || !sc.descs[di].counted {
			continue
		}
		merged = mergeMetadata(merged, r.Metadata)
	}
	if len(merged) > 0 {
		// Rule metadata is JSON's kinds, which NewStruct takes.
		if s, err := structpb.NewStruct(merged); err == nil {
			md.Fields["metadata"] = structpb.NewStructValue(s)
		}
	}
	return md
}

// requestFields is the request as the reference server puts it in
// dynamic_metadata: domain; descriptors, each with entries ("key=value"),
// limit (protobuf text) and hitsAddend when set; hitsAddend when not 0.
func requestFields(req *pb.RateLimitRequest) *structpb.Struct {
	md := &structpb.Struct{Fields: map[string]*structpb.Value{}}
	md.Fields["domain"] = structpb.NewStringValue(req.GetDomain())
	descs := make([]*structpb.Value, len(req.GetDescriptors()))
	for i, d := range req.GetDescriptors() {
		entries := make([]*structpb.Value, len(d.GetEntries()))
		for j, e := range d.GetEntries() {
			entries[j] = structpb.NewStringValue(e.GetKey() + "=" + e.GetValue())
		}
		fields := map[string]*structpb.Value{"entries": structpb.NewListValue(&structpb.ListValue{Values: entries})}
		if l := d.GetLimit(); l != nil {
			fields["limit"] = structpb.NewStringValue(overrideText(l))
		}
		if h := d.GetHitsAddend(); h != nil {
			fields["hitsAddend"] = structpb.NewNumberValue(float64(h.GetValue()))
		}
		descs[i] = structpb.NewStructValue(&structpb.Struct{Fields: fields})
	}
	md.Fields["descriptors"] = structpb.NewListValue(&structpb.ListValue{Values: descs})
	if h := req.GetHitsAddend(); h != 0 {
		md.Fields["hitsAddend"] = structpb.NewNumberValue(float64(h))
	}
	return md
}

// overrideText is an override in protobuf text, as the reference writes
// it, with one space between fields whatever the build: protobuf-go adds a
// second one in some builds and not in others, on purpose, and access logs
// and filters that read the metadata should not see it change with an
// upgrade.
func overrideText(l *rlv3.RateLimitDescriptor_RateLimitOverride) string {
	return strings.ReplaceAll(l.String(), "  ", " ")
}

// mergeMetadata returns dst with src's names it lacks, merging mappings
// under one name. It writes to neither: rules share them.
func mergeMetadata(dst, src map[string]any) map[string]any {
	if dst == nil {
		return src
	}
	out := maps.Clone(dst)
	for k, v := range src {
		have, ok := out[k]
		if !ok {
			out[k] = v
			continue
		}
		hm, hok := have.(map[string]any)
		vm, vok := v.(map[string]any)
		if hok && vok {
			out[k] = mergeMetadata(hm, vm)
		}
	}
	return out
}
